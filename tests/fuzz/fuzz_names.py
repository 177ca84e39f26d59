"""Hostile names, configs and config values for the admin fuzz tests (issue 12, SPEC S13.3)."""

from __future__ import annotations

import posixpath

from hypothesis import strategies as st

# Where a broker's log.dirs sits below the module's temporary directory:
# <module tmp>/cluster/broker-N/data. A name may climb out of log.dirs (that is what is tested),
# but never out of the module's temporary directory: no generated name can touch anything else.
_FAKE_DATA_DIR = "/module/cluster/broker-1/data"


def stays_in_module_dir(name: str) -> bool:
    if name.startswith("/"):
        return False  # absolute names come only from NameSpec("outside", ...), under a temp dir of ours
    for partition in ("0", "1"):
        path = posixpath.normpath(posixpath.join(_FAKE_DATA_DIR, f"{name}-{partition}"))
        if not (path + "/").startswith("/module/"):
            return False
    return True


class NameSpec:
    """A topic name, some of them relative to topics that exist only at run time:
    ``literal`` (the text), ``committed``/``scratch`` (that topic's name + the text as suffix),
    ``outside`` (an absolute path in a temporary directory outside log.dirs + the text)."""

    __slots__ = ("kind", "text")

    def __init__(self, kind: str, text: str) -> None:
        self.kind = kind
        self.text = text

    def __repr__(self) -> str:
        return f"NameSpec({self.kind!r}, {self.text!r})"


FIXED_NAMES = [
    "", ".", "..", "...", "/", "a/b", "a_b/partitions", "../x", "../../x", "./x", "x/..", "x/../../y",
    "a\x00b", "\x00", "topic\n", " ", "a b", "ü-topic", "☃", "\U0001f600", "名前", "CON", "-", "_", "a..b",
    "a" * 249, "a" * 250, "a" * 255, "b" * 300, "é" * 200, "x" * 1000, "__consumer_offsets", "-1", "*", "$x",
    "%2e%2e", "a\\b", "..\\..\\x", "\ufffd",
]
SUFFIXES = ["/partitions", "/partitions/0", "/partitions/0/state", "/", "/..", "/../x", "-0", ".", "..",
            "\x00", "\x00junk", " ", "/config", "é"]

_alphabet = st.sampled_from([*"ab09._-/", "..", "\x00", "é", "☃", " ", "\\"])


def literal_names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(FIXED_NAMES),
        st.lists(_alphabet, max_size=12).map("".join),
        st.text(max_size=40),
        st.integers(240, 320).map(lambda n: "n" * n),
        st.text(alphabet="abcXYZ019._-", min_size=1, max_size=30),
    ).filter(stays_in_module_dir)


def names() -> st.SearchStrategy[NameSpec]:
    return st.one_of(
        literal_names().map(lambda t: NameSpec("literal", t)),
        st.sampled_from(SUFFIXES).map(lambda s: NameSpec("committed", s)),
        st.sampled_from(SUFFIXES).map(lambda s: NameSpec("scratch", s)),
        st.sampled_from(["/t", "/a/b", "/x-0"]).map(lambda s: NameSpec("outside", s)),
    )


TOPIC_CONFIG_KEYS = ["segment.bytes", "segment.ms", "segment.index.bytes", "index.interval.bytes", "retention.ms",
                     "retention.bytes", "flush.messages", "flush.ms", "max.message.bytes", "file.delete.delay.ms",
                     "min.insync.replicas", "unclean.leader.election.enable", "message.timestamp.type"]
INT_KEYS_MIN = {"segment.bytes": 14, "segment.ms": 1, "segment.index.bytes": 4, "index.interval.bytes": 0,
                "retention.ms": -1, "retention.bytes": -1, "flush.messages": 1, "flush.ms": 0,
                "max.message.bytes": 0, "file.delete.delay.ms": 0, "min.insync.replicas": 1}
LONG_MAX = (1 << 63) - 1
UNKNOWN_KEYS = ["foo", "", "../x", "log.dirs", "broker.id", "zookeeper.connect", "segment.bytes ", "SEGMENT.BYTES",
                "a" * 300, "\x00", "cleanup.policy.x"]
CONFIG_VALUES = ["100", "-7", "-1", "0", "1", "14", "4096", "1048576", "abc", "", " ", "1e9", "9" * 30, "2147483648",
                 "-9223372036854775809", "9223372036854775807", "true", "false", "TRUE", "CreateTime",
                 "LogAppendTime", "x" * 5000, "\x00", "../../etc", "٣", " 5 ", "+5", "0x10", "NaN", "5.5"]


def config_keys() -> st.SearchStrategy[str]:
    return st.sampled_from(TOPIC_CONFIG_KEYS) | st.sampled_from(UNKNOWN_KEYS)


def config_values() -> st.SearchStrategy[str]:
    return st.sampled_from(CONFIG_VALUES) | st.integers(-(1 << 64), 1 << 64).map(str) | st.text(max_size=12)


def _parse_long(value: str) -> int | None:
    """What Kafka's Long.parseLong takes (after trim): optional sign, ASCII digits, in range."""
    v = value.strip()
    digits = v[1:] if v[:1] in "+-" else v
    if not digits or not all("0" <= c <= "9" for c in digits) or len(digits) > 25:
        return None
    n = int(v)
    return n if -(1 << 63) <= n <= LONG_MAX else None


def clearly_invalid(key: str, value: str) -> bool:
    """A topic config no correct broker may accept (Kafka's ConfigDef bounds, a few of them)."""
    if key not in TOPIC_CONFIG_KEYS:
        return True
    if key in INT_KEYS_MIN:
        n = _parse_long(value)
        return n is None or n < INT_KEYS_MIN[key] or (key == "min.insync.replicas" and n > (1 << 31) - 1)
    if key == "unclean.leader.election.enable":
        return value.strip().lower() not in ("true", "false")
    if key == "message.timestamp.type":
        return value.strip() not in ("CreateTime", "LogAppendTime")
    return False
