"""The replication bench's options: ``make bench`` measures latency at linger_ms=0 while the
throughput cases keep their own linger, so the two must be separate settings."""

from __future__ import annotations

from bench.replication_bench import build_parser, rate_linger_ms


def test_rate_runs_take_their_own_linger() -> None:
    args = build_parser().parse_args(["--linger-ms", "2", "--rate", "20000", "--rate-linger-ms", "0"])
    assert args.linger_ms == 2
    assert rate_linger_ms(args) == 0


def test_rate_runs_default_to_the_throughput_linger() -> None:
    args = build_parser().parse_args(["--linger-ms", "7", "--rate", "20000"])
    assert rate_linger_ms(args) == 7
