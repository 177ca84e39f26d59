"""A forged count in a Kafka request frame is a protocol error, never an abort (SPEC S13).

kio's compiled reader reserves memory from the counts on the wire; before ``broker.network.kafka_wire_bounds``
a 54-byte Fetch v12 with a forged compact-array count made it ask for ~220 GB and abort the whole
broker ("memory allocation of 221859345984 bytes failed"), found by mutating valid frames. The forged
frames are decoded in a child process, so that without the check this test fails instead of
taking pytest down with it."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_frames import frame

from broker.network import kafka_wire as kw
from broker.network.kafka_wire_bounds import FrameBoundsError, check_request

ROOT = Path(__file__).resolve().parents[2]

FETCH_V12 = frame(1, 12)  # ... topics 01, forgotten_topics 01, rack_id 01, tagged fields 00
METADATA_V12 = frame(3, 12)  # ... header tags 00, topics 01, allow 01, authorized ops 00, tags 00
METADATA_V1 = frame(3, 1)  # ... topics int32 0

FORGED = {
    # a tagged-field count of ~2**34 at the end of a Fetch
    "fetch v12 tagged fields": FETCH_V12[:-1] + bytes.fromhex("c9bdeca767"),
    "fetch v12 topics": FETCH_V12[:-4] + bytes.fromhex("ffffffff0f") + FETCH_V12[-3:],
    "metadata v12 topics": METADATA_V12[:-4] + bytes.fromhex("ffffffff0f") + METADATA_V12[-3:],
    "metadata v1 topics": METADATA_V1[:-4] + bytes.fromhex("7fffffff") + b"\0" * 40,
    "metadata v12 a topic name longer than the frame": METADATA_V12[:-4] + bytes.fromhex("02") + bytes(16)
    + bytes.fromhex("ffffff7f") + b"x" * 8,
}


def test_the_valid_frames_pass() -> None:
    for f in (FETCH_V12, METADATA_V12, METADATA_V1):
        kw.decode_request(f)


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_count_is_refused_before_kio_reads_it(name: str) -> None:
    code = ("import sys\nfrom broker.network import kafka_wire as kw\n"
            "try:\n    kw.decode_request(bytes.fromhex(sys.argv[1]))\n"
            "except kw.ProtocolError as e:\n    print('ProtocolError', e)\n")
    r = subprocess.run([sys.executable, "-c", code, FORGED[name].hex()], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("ProtocolError"), (r.returncode, r.stdout, r.stderr[-500:])


def _every_version() -> list[tuple[int, int]]:
    return [(k, v) for k, (_n, lo, hi) in kw.SUPPORTED.items() for v in range(lo, hi + 1)]


@settings(max_examples=400)
@given(st.sampled_from(_every_version()), st.integers(0, 2**32 - 1))
def test_mutated_frames_are_decoded_or_refused_with_a_protocol_error(kv: tuple[int, int], seed: int) -> None:
    """Valid frames of every advertised version with a few bytes overwritten (past the api key and
    version) and maybe junk appended: decoded, or a ProtocolError - nothing else, no abort."""
    rng = random.Random(seed)
    f = bytearray(frame(*kv))
    for _ in range(rng.randint(1, 4)):
        f[rng.randrange(4, len(f))] = rng.randrange(256)
    if rng.random() < 0.3:
        f += bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
    try:
        kw.decode_request(bytes(f))
    except kw.ProtocolError:
        pass


def test_counts_are_checked_against_the_smallest_element() -> None:
    # Metadata v1 topics: each element is at least a 2-byte string length; 3 topics in 5 bytes cannot be.
    cls = kw._request_class(3, 1)
    head = METADATA_V1[:-4]
    with pytest.raises(FrameBoundsError):
        check_request(cls.__header_schema__, cls, head + bytes.fromhex("00000003") + b"\0" * 5)
    check_request(cls.__header_schema__, cls, head + bytes.fromhex("00000003") + b"\0" * 6)
