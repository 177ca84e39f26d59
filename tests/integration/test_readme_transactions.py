"""The README's transaction snippets run verbatim (issue 31): the fenced ``python`` blocks of its
"Transactions (exactly-once)" section - librdkafka's (confluent-kafka) transactional producer and
read_committed consumer, then our ``Producer``'s transaction API and read_committed ``Consumer`` -
executed exactly as written, in order, against a fresh 3-broker cluster.

The section is found by its heading (the marker) and ends at the next ``## `` heading; its blocks
are taken with ``test_readme.readme_blocks`` (the same parser the whole-README test uses). Nothing
is substituted: the snippets find the cluster as a newcomer's would (``kafka_bootstrap()`` and
``default_bootstrap()`` read ``./.minikafka``), so the test runs them in a scratch directory
holding ``.minikafka`` (a link to the test cluster's directory) and ``.venv``, as test_readme does.
Beyond exiting 0, each snippet must print the committed records it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import Block, readme_blocks

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Transactions (exactly-once)"
BLOCK_TIMEOUT_S = 120


def transaction_blocks(text: str) -> list[Block]:
    """The runnable python blocks between the Transactions heading and the next ``## `` heading."""
    lines = text.splitlines()
    start = lines.index(SECTION) + 1  # 1-based line of the heading
    end = next((i + 1 for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines) + 1)
    return [b for b in readme_blocks(text) if start < b.line < end and b.lang == "python" and b.skip is None]


def test_the_transactions_section_has_both_snippets() -> None:
    blocks = transaction_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 2, [b.line for b in blocks]
    assert "confluent_kafka" in blocks[0].code and "transactional.id" in blocks[0].code
    assert "client.producer" in blocks[1].code and "send_offsets_to_transaction" in blocks[1].code


def test_readme_transaction_snippets_run_verbatim(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3)
    assert c.state is not None
    work = tmp_path / "newcomer"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / ".minikafka").symlink_to(Path(c.state.dir).resolve())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("MINIKAFKA_BOOTSTRAP", "MINIKAFKA_KAFKA_BOOTSTRAP", "MINIKAFKA_ZOOKEEPER"):
        env.pop(name, None)  # found through ./.minikafka, as on a newcomer's machine
    confluent, ours = transaction_blocks((ROOT / "README.md").read_text())
    outputs = []
    for block in (confluent, ours):
        r = subprocess.run([sys.executable, "-c", block.code], cwd=work, env=env, capture_output=True,
                           text=True, timeout=BLOCK_TIMEOUT_S)
        assert r.returncode == 0, (f"README block at line {block.line} exited {r.returncode}:\n{block.code}\n"
                                   f"--- stdout\n{r.stdout[-2000:]}\n--- stderr\n{r.stderr[-3000:]}")
        outputs.append(r.stdout)
    # librdkafka's read_committed consumer printed both committed records (key, value).
    assert "b'acct-1' b'debit 10'" in outputs[0] and "b'acct-2' b'credit 10'" in outputs[0], outputs[0]
    # Our read_committed consumer read partitions 0-2: librdkafka's two records and ours.
    printed = outputs[1].strip().splitlines()[-1]
    assert printed.count("b'debit 10'") == 2 and printed.count("b'credit 10'") == 1, printed
