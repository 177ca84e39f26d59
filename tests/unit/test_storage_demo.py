"""``minikafka demo log`` reads back every record it appended (issue 17: "read back 2900" after
"appended 10000" read like data loss; a read stops at a segment's end, so the demo reads on)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from client.ops.storage_demo import run_log_demo


def test_demo_reads_back_everything_it_appended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_log_demo(argparse.Namespace(dir=str(tmp_path), records=3000)) == 0
    out = capsys.readouterr().out
    assert "appended 3000 records" in out
    assert "read back all 3000 records" in out and "last=b'message 2999'" in out
