"""History checking in the style of Jepsen's Kafka workload, pure.

A history is what clients saw: every write with its outcome - ``ok`` (with
the offset the broker acknowledged), ``fail`` (a definite error such as
NOT_ENOUGH_REPLICAS: the write did not happen) or ``unknown`` (a timeout: it
may have happened) - and, after the faults heal, full reads of every
partition. ``check`` finds:

* lost writes: acknowledged, not read, although records after their offset were read;
* unseen writes: acknowledged and not read, with nothing read after them;
* duplicates: one value at two offsets;
* inconsistent offsets: two values at one offset, or an acknowledged value read
  at another offset than the one acknowledged;
* reordering: writes of one producer to one partition read in another order than sent;
* failed writes read: a definite failure whose value is there after all.

Values must be unique per history (the workload makes them so).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Write:
    producer: str
    partition: int
    value: str
    status: str  # ok | fail | unknown
    offset: int = -1


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: str


@dataclass
class Report:
    writes: dict[str, int] = field(default_factory=dict)
    lost: list[Write] = field(default_factory=list)
    unseen: list[Write] = field(default_factory=list)
    duplicates: list[tuple[str, list[int]]] = field(default_factory=list)
    inconsistent_offsets: list[tuple[int, int, list[str]]] = field(default_factory=list)
    reordered: list[tuple[str, int, str, str]] = field(default_factory=list)
    failed_but_read: list[Write] = field(default_factory=list)

    @property
    def anomalies(self) -> dict[str, int]:
        return {"lost": len(self.lost), "unseen": len(self.unseen), "duplicates": len(self.duplicates),
                "inconsistent_offsets": len(self.inconsistent_offsets), "reordered": len(self.reordered),
                "failed_but_read": len(self.failed_but_read)}

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        w = self.writes
        return (f"writes ok {w.get(OK, 0)}, failed {w.get(FAIL, 0)}, unknown {w.get(UNKNOWN, 0)}; anomalies: "
                + ", ".join(f"{k} {v}" for k, v in self.anomalies.items()))


def check(writes: Sequence[Write], reads: Iterable[Read]) -> Report:
    report = Report()
    for w in writes:
        report.writes[w.status] = report.writes.get(w.status, 0) + 1
    at_offset: dict[tuple[int, int], set[str]] = {}
    offsets_of: dict[str, set[tuple[int, int]]] = {}
    max_read: dict[int, int] = {}
    for r in reads:
        at_offset.setdefault((r.partition, r.offset), set()).add(r.value)
        offsets_of.setdefault(r.value, set()).add((r.partition, r.offset))
        max_read[r.partition] = max(max_read.get(r.partition, -1), r.offset)
    for (partition, offset), seen in sorted(at_offset.items()):
        if len(seen) > 1:
            report.inconsistent_offsets.append((partition, offset, sorted(seen)))
    for value, where in sorted(offsets_of.items()):
        if len(where) > 1:
            report.duplicates.append((value, sorted(o for _p, o in where)))
    for w in writes:
        places = offsets_of.get(w.value)
        if w.status == OK:
            if not places:
                if w.offset < max_read.get(w.partition, -1):
                    report.lost.append(w)
                else:
                    report.unseen.append(w)
            elif (w.partition, w.offset) not in places:
                report.inconsistent_offsets.append((w.partition, w.offset, [w.value]))
        elif w.status == FAIL and places:
            report.failed_but_read.append(w)
    # Per producer and partition, the offsets read must increase in send order.
    last: dict[tuple[str, int], tuple[int, str]] = {}
    for w in writes:
        places = offsets_of.get(w.value)
        if not places:
            continue
        offset = min(o for _p, o in places)
        key = (w.producer, w.partition)
        prev = last.get(key)
        if prev is not None and offset < prev[0]:
            report.reordered.append((w.producer, w.partition, prev[1], w.value))
        else:
            last[key] = (offset, w.value)
    return report

