"""The broker's malloc settings (broker/server/allocator.py): applied at start on glibc, never over an
operator's own GLIBC_TUNABLES / MALLOC_*_ settings."""

from __future__ import annotations

import argparse
import ctypes.util
import platform
from pathlib import Path

import pytest

from broker import main
from broker.server import allocator

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or ctypes.util.find_library("c") is None,
                           reason="glibc only")


def test_operator_settings_win() -> None:
    assert allocator.operator_settings({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"})
    assert allocator.operator_settings({"MALLOC_ARENA_MAX_": "2"})
    assert not allocator.operator_settings({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "PATH": "/bin"})
    assert not allocator.tune_malloc({"MALLOC_TRIM_THRESHOLD_": "0"})


@glibc
def test_tune_malloc_applies_on_glibc() -> None:
    assert allocator.tune_malloc({})


def test_the_broker_tunes_malloc_before_anything_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(main, "tune_malloc", lambda: calls.append("tuned") or True)
    args = argparse.Namespace(config=tmp_path / "missing.properties", set=[], log_level="INFO", log_format="text")
    assert main.run(args) == 2  # the config is refused, after the allocator was set up
    assert calls == ["tuned"]
