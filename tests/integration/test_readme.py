"""The README runs verbatim (issue 17): every ``sh`` and ``python`` block, in order, against a cluster.

A newcomer pastes the README's blocks into a shell or a Python prompt beside the cluster
``make quickstart`` leaves running. This test does the same against a fresh local cluster: it
works in a scratch directory holding ``.venv`` (a link to the project's) and ``.minikafka`` (a
link to the test cluster's directory, so the CLI's default ``--dir`` finds it), with the
environment that ``minikafka cluster status`` tells the user to export (``MINIKAFKA_BOOTSTRAP``,
``MINIKAFKA_ZOOKEEPER``, ``MINIKAFKA_KAFKA_BOOTSTRAP``). Blocks fenced as ``text`` are synopses, not commands; a block right
after a ``<!-- readme-test: skip REASON -->`` line is not run (only Docker and the ``make``
targets that would run this very suite are marked so).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip\b(.*?)-->")
BLOCK_TIMEOUT_S = 240


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    code: str
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
    """Fenced blocks with their language and the skip marker on the line before, if any."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = SKIP_MARK.search(prev)
        blocks.append(Block(start + 1, m.group(1), "\n".join(lines[start + 1:j]),
                            mark.group(1).strip() or "marked" if mark else None))
        i = j + 1
    return blocks


def test_readme_blocks_are_found_and_fenced_with_a_language() -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert blocks, "the README has no code blocks?"
    unlabeled = [b.line for b in blocks if not b.lang]
    assert not unlabeled, f"README blocks without a language at lines {unlabeled} (sh, python or text)"
    runnable = [b for b in blocks if b.lang in ("sh", "python") and b.skip is None]
    assert len(runnable) >= 5


@pytest.mark.timeout(900)  # a dozen blocks, some start Spark; each is bounded by BLOCK_TIMEOUT_S
def test_every_readme_block_runs_against_a_local_cluster(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    assert c.state is not None
    work = tmp_path / "newcomer"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / ".minikafka").symlink_to(Path(c.state.dir).resolve())
    # Issue 33: the Kafka-client blocks find the cluster's Kafka listeners by themselves (./.minikafka,
    # MINIKAFKA_KAFKA_BOOTSTRAP not exported) while another program holds Kafka's 9092 - a block
    # that fell back to 9092 would talk to it and fail.
    env = dict(os.environ, MINIKAFKA_BOOTSTRAP=c.state.bootstrap_servers,
               MINIKAFKA_ZOOKEEPER=c.state.zookeeper_connect, PYTHONPATH=str(ROOT))
    env.pop("MINIKAFKA_KAFKA_BOOTSTRAP", None)
    squatter = socket.socket()
    try:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", 9092))
        squatter.listen(16)  # accepts connections it never answers
    except OSError:
        pass  # 9092 is held by something else already: the same situation
    try:
        ran = _run_blocks(work, env)
    finally:
        squatter.close()
    assert ran >= 5


def _run_blocks(work: Path, env: dict[str, str]) -> int:
    ran = 0
    for block in readme_blocks((ROOT / "README.md").read_text()):
        if block.lang not in ("sh", "python") or block.skip is not None:
            continue
        cmd = ["bash", "-euo", "pipefail", "-c", block.code] if block.lang == "sh" \
            else [sys.executable, "-c", block.code]
        started = time.monotonic()
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        print(f"README block at line {block.line} ({block.lang}): {time.monotonic() - started:.1f} s")
        assert r.returncode == 0, (f"README block at line {block.line} ({block.lang}) exited {r.returncode}:\n"
                                   f"{block.code}\n--- stdout\n{r.stdout[-2000:]}\n--- stderr\n{r.stderr[-3000:]}")
        ran += 1
    return ran
