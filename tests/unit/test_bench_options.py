"""The replication bench's options: ``make bench`` measures latency at linger_ms=0 while the
throughput cases keep their own linger, so the two must be separate settings."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# bench/ holds scripts, not an installed package: load the file itself (any working directory).
_spec = importlib.util.spec_from_file_location(
    "replication_bench", Path(__file__).resolve().parents[2] / "bench" / "replication_bench.py")
assert _spec is not None and _spec.loader is not None
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
build_parser, rate_linger_ms = _bench.build_parser, _bench.rate_linger_ms


def test_rate_runs_take_their_own_linger() -> None:
    args = build_parser().parse_args(["--linger-ms", "2", "--rate", "20000", "--rate-linger-ms", "0"])
    assert args.linger_ms == 2
    assert rate_linger_ms(args) == 0


def test_rate_runs_default_to_the_throughput_linger() -> None:
    args = build_parser().parse_args(["--linger-ms", "7", "--rate", "20000"])
    assert rate_linger_ms(args) == 7


def test_the_librdkafka_figure_is_optional() -> None:
    assert build_parser().parse_args([]).no_librdkafka is False
    assert build_parser().parse_args(["--no-librdkafka"]).no_librdkafka is True
    reason = _bench.librdkafka_missing()
    assert reason is None or "confluent_kafka" in reason


def test_produce_over_grpc_is_a_comparison_option() -> None:
    assert build_parser().parse_args([]).grpc_produce is False
    assert build_parser().parse_args(["--grpc-produce"]).grpc_produce is True


def test_the_page_cache_baseline_writes_the_bytes_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "00000000000000000000.log").write_bytes(b"x" * 3000)
    (tmp_path / "b.index").write_bytes(b"y" * 24)
    assert _bench.bytes_on_disk([tmp_path]) == 3024
    assert _bench.bytes_on_disk([tmp_path / "a", tmp_path / "gone"]) == 3000
    cost = _bench.fresh_write_cost(tmp_path, 3 * (1 << 20) + 5)
    assert cost >= 0.0
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["00000000000000000000.log", "a", "b.index"]


def test_broker_cpu_is_split_into_user_and_kernel_time() -> None:
    (user, system), = _bench.broker_cpu_split({1: os.getpid()}).values()
    assert user > 0.0 and system >= 0.0
    assert _bench.broker_cpu_s({1: os.getpid()})[1] >= user
    assert _bench.broker_cpu_split({2: 2 ** 22 + 12345}) == {2: (0.0, 0.0)}  # a pid that is gone
