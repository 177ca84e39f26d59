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

A compacted topic's history (``check_compacted``): the writes carry keys, and some are tombstones
(no value). The cleaner removes every record but the latest of its key, and tombstones themselves
after ``delete.retention.ms``, so older acknowledged writes are *meant* to be missing; what the
full read must show is the *latest value per key*: for every key, the record of its latest
acknowledged write (the highest acknowledged offset), or a later write of that key whose outcome was
unknown (it may have landed). It finds:

* lost latest: a key whose latest acknowledged write is gone and nothing of that key after it was
  read - an acknowledged value was lost, or an older one came back from under a tombstone;
* phantoms: a key's latest record read beyond its latest acknowledged write, but no write of that
  key was unknown (nor a value read that nobody wrote);
* inconsistent offsets, duplicates and failed writes read, as ``check``; and offsets that do not
  strictly increase in the order read (a consumer must never see them go back).

A consumer group's history (``check_group``) is what the group's members saw:
every commit the coordinator acknowledged (``Commit``: when it was sent, when
its success came back), every committed offset read back (``CommittedRead``:
an OffsetFetch, by a member, an observer or a probe of one broker, with when it
was sent) and every record a member delivered (``Delivery``). It finds:

* commit regressions: a committed offset read back - or acknowledged to a later
  commit - lower than a commit acknowledged before that read or commit was
  sent, on the same partition, with no explicit reset (``Commit.reset``) in
  between (SPEC S11.4). One regression per acknowledged commit read lower: the
  first read that shows it; a stale coordinator answering many reads is one
  finding, not hundreds;
* skipped records: acknowledged writes (the producer's ``Write``, ``ok``) below
  the group's final committed offset of their partition that no member ever
  delivered - the group committed past them.

Reads and commits sent while a commit was in flight may see either value:
only what completed before a read was sent binds it (linearizability's rule).
Times are any one clock's numbers (the workload uses ``time.monotonic()``).
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
    key: str | None = None  # compacted topics (check_compacted)
    tombstone: bool = False  # written without a value; ``value`` then only names the write


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: str
    key: str | None = None
    tombstone: bool = False


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



# ------------------------------------------------------------------ compacted topics


@dataclass
class CompactedReport:
    writes: dict[str, int] = field(default_factory=dict)
    keys: int = 0  # (partition, key) pairs with an acknowledged write
    lost: list[Write] = field(default_factory=list)  # the latest acknowledged write of its key, gone
    phantoms: list[Read] = field(default_factory=list)
    duplicates: list[tuple[str, list[int]]] = field(default_factory=list)
    inconsistent_offsets: list[tuple[int, int, list[str]]] = field(default_factory=list)
    backwards: list[tuple[int, int, int]] = field(default_factory=list)  # partition, offset, then offset
    failed_but_read: list[Write] = field(default_factory=list)

    @property
    def anomalies(self) -> dict[str, int]:
        return {"lost_latest": len(self.lost), "phantoms": len(self.phantoms), "duplicates": len(self.duplicates),
                "inconsistent_offsets": len(self.inconsistent_offsets), "offsets_backwards": len(self.backwards),
                "failed_but_read": len(self.failed_but_read)}

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        w = self.writes
        return (f"compacted: writes ok {w.get(OK, 0)}, failed {w.get(FAIL, 0)}, unknown {w.get(UNKNOWN, 0)}, "
                f"{self.keys} keys' latest values checked; anomalies: "
                + ", ".join(f"{k} {v}" for k, v in self.anomalies.items()))


def check_compacted(writes: Sequence[Write], reads: Sequence[Read]) -> CompactedReport:
    """A compacted topic's history: ``reads`` is one full read (or one replica's records) in the
    order read; see the module's docstring for what must hold."""
    report = CompactedReport()
    for w in writes:
        report.writes[w.status] = report.writes.get(w.status, 0) + 1
    by_value = {w.value: w for w in writes if not w.tombstone}
    acked_at = {(w.partition, w.offset): w for w in writes if w.status == OK}
    at_offset: dict[tuple[int, int], set[str]] = {}
    offsets_of: dict[str, set[tuple[int, int]]] = {}
    last_read: dict[int, int] = {}
    latest_read: dict[tuple[int, str | None], Read] = {}
    for r in reads:
        what = f"tombstone of {r.key}" if r.tombstone else r.value
        at_offset.setdefault((r.partition, r.offset), set()).add(what)
        if r.offset <= last_read.get(r.partition, -1):
            report.backwards.append((r.partition, last_read[r.partition], r.offset))
        last_read[r.partition] = r.offset
        prev = latest_read.get((r.partition, r.key))
        if prev is None or r.offset > prev.offset:
            latest_read[(r.partition, r.key)] = r
        acked = acked_at.get((r.partition, r.offset))
        if r.tombstone:
            if acked is not None and not (acked.tombstone and acked.key == r.key):
                report.inconsistent_offsets.append((r.partition, r.offset, [what, acked.value]))
            continue
        offsets_of.setdefault(r.value, set()).add((r.partition, r.offset))
        written = by_value.get(r.value)
        if written is None or written.key != r.key or written.partition != r.partition:
            report.phantoms.append(r)
        elif written.status == FAIL:
            report.failed_but_read.append(written)
        elif written.status == OK and written.offset != r.offset:
            report.inconsistent_offsets.append((r.partition, r.offset, [r.value]))
    for (partition, offset), seen in sorted(at_offset.items()):
        if len(seen) > 1:
            report.inconsistent_offsets.append((partition, offset, sorted(seen)))
    for value, where in sorted(offsets_of.items()):
        if len(where) > 1:
            report.duplicates.append((value, sorted(o for _p, o in where)))
    # The latest value per key.
    latest_acked: dict[tuple[int, str | None], Write] = {}
    unknown: dict[tuple[int, str | None], list[Write]] = {}
    for w in writes:
        k = (w.partition, w.key)
        if w.status == OK:
            if k not in latest_acked or w.offset > latest_acked[k].offset:
                latest_acked[k] = w
        elif w.status == UNKNOWN:
            unknown.setdefault(k, []).append(w)
    report.keys = len(latest_acked)
    for k, w in sorted(latest_acked.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        found = latest_read.get(k)
        maybe = unknown.get(k, [])
        if found is None:
            # A tombstone may be gone (delete.retention.ms), and so may an unknown tombstone after it.
            if not (w.tombstone or any(u.tombstone for u in maybe)):
                report.lost.append(w)
        elif found.offset < w.offset:
            report.lost.append(w)
        elif found.offset > w.offset:
            if found.tombstone:
                if not any(u.tombstone for u in maybe):
                    report.phantoms.append(found)
            elif not any(u.value == found.value for u in maybe):
                report.phantoms.append(found)
    return report


# ------------------------------------------------------------------ consumer groups


@dataclass(frozen=True)
class Commit:
    """A commit the coordinator acknowledged: ``offset`` is the next offset to consume."""

    member: str
    partition: int
    offset: int
    sent: float  # when the OffsetCommit went out
    acked: float  # when its success came back
    reset: bool = False  # an explicit reset (e.g. ``groups --reset-offsets``): may move the offset back


@dataclass(frozen=True)
class CommittedRead:
    """A committed offset read back (OffsetFetch): ``offset`` -1 when none was committed."""

    reader: str
    partition: int
    offset: int
    sent: float  # when the OffsetFetch went out


@dataclass(frozen=True)
class Delivery:
    """A record a member's poll handed to the application."""

    member: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Regression:
    partition: int
    acknowledged: Commit  # the commit acknowledged before ...
    observed: int  # ... this lower value was read back (or acknowledged to a later commit)
    by: str  # "read by <reader>" or "commit by <member>"
    at: float  # when that read or commit was sent


@dataclass
class GroupReport:
    commits: int = 0
    reads: int = 0
    deliveries: int = 0
    redelivered: int = 0  # deliveries of a (partition, offset) delivered before: at-least-once, not an anomaly
    final_committed: dict[int, int] = field(default_factory=dict)
    regressions: list[Regression] = field(default_factory=list)
    skipped: list[Write] = field(default_factory=list)

    @property
    def anomalies(self) -> dict[str, int]:
        return {"commit_regressions": len(self.regressions), "skipped": len(self.skipped)}

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        committed = ", ".join(f"{p}: {o}" for p, o in sorted(self.final_committed.items())) or "none"
        return (f"group: {self.commits} commits acknowledged, {self.reads} committed offsets read, "
                f"{self.deliveries} records delivered ({self.redelivered} again), final committed {{{committed}}}; "
                "anomalies: " + ", ".join(f"{k} {v}" for k, v in self.anomalies.items()))


def commit_regressions(commits: Iterable[Commit], reads: Iterable[CommittedRead]) -> list[Regression]:
    """Committed offsets that went backwards (see the module's docstring), in time order.

    Per partition, the *floor* at time t is the highest offset acknowledged by a commit whose
    success came back before t (an acknowledged reset sets it to the reset's offset instead).
    Every read sent at t, and every commit sent at t that is not a reset, must be at or above it."""
    acks: dict[int, list[Commit]] = {}
    observations: dict[int, list[tuple[float, int, str]]] = {}
    for c in commits:
        acks.setdefault(c.partition, []).append(c)
        if not c.reset:
            observations.setdefault(c.partition, []).append((c.sent, c.offset, f"commit by {c.member}"))
    for r in reads:
        observations.setdefault(r.partition, []).append((r.sent, r.offset, f"read by {r.reader}"))
    found: list[Regression] = []
    for partition, seen in observations.items():
        # An acknowledgement at the very moment a read is sent does not bind it (strictly before).
        done = sorted(acks.get(partition, []), key=lambda c: (c.acked, c.sent))
        floor: Commit | None = None
        reported: set[Commit] = set()
        i = 0
        for sent, offset, by in sorted(seen, key=lambda o: (o[0], o[1], o[2])):
            while i < len(done) and done[i].acked < sent:
                c = done[i]
                if c.reset or floor is None or c.offset > floor.offset:
                    floor = c
                i += 1
            if floor is not None and offset < floor.offset and floor not in reported:
                reported.add(floor)
                found.append(Regression(partition, floor, offset, by, sent))
    return sorted(found, key=lambda r: (r.at, r.partition))


def skipped_records(writes: Iterable[Write], deliveries: Iterable[Delivery],
                    final_committed: dict[int, int]) -> list[Write]:
    """Acknowledged writes below their partition's final committed offset that no member delivered."""
    delivered = {(d.partition, d.offset) for d in deliveries}
    return [w for w in writes if w.status == OK and 0 <= w.offset < final_committed.get(w.partition, -1)
            and (w.partition, w.offset) not in delivered]


def check_group(writes: Sequence[Write], commits: Sequence[Commit], reads: Sequence[CommittedRead],
                deliveries: Sequence[Delivery], final_committed: dict[int, int]) -> GroupReport:
    """A consumer group's history against the producers' (``writes``). ``final_committed``: the
    group's committed offset per partition once the run is over (a final OffsetFetch, also one of
    ``reads``); a partition without one has no records the group could have skipped."""
    seen: set[tuple[int, int]] = set()
    again = 0
    for d in deliveries:
        key = (d.partition, d.offset)
        if key in seen:
            again += 1
        seen.add(key)
    return GroupReport(commits=len(commits), reads=len(reads), deliveries=len(deliveries), redelivered=again,
                       final_committed=dict(final_committed), regressions=commit_regressions(commits, reads),
                       skipped=skipped_records(writes, deliveries, final_committed))
