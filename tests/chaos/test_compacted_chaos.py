"""``minikafka chaos --compacted`` against a real 3-broker cluster whose cleaners run back to back: a
compacted topic under keyed updates and tombstones (and a consumer group reading it) while its
leaders are SIGKILLed; the checker's view is the latest value per key, which must be the
acknowledged writes' latest per key (``client.ops.history.check_compacted``), and the replicas'
compacted logs must agree (verify-replicas compares compacted topics by the latest record of every
key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DURATION_S = 16


def test_chaos_compacted_leader_kills_keep_the_latest_value_per_key(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster.start(3, log_cleaner_backoff_ms="200")
    r = subprocess.run([sys.executable, "-m", "client.cli", "chaos", "--dir", str(c.state.dir), "--compacted",
                        "--keys", "20", "--scenario", "leader-kill", "--duration", str(DURATION_S), "--interval", "3",
                        "--rate", "150", "--members", "1", "--seed", "7", "--output", "json"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                       timeout=DURATION_S + 240)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    result = json.loads(r.stdout)
    print("chaos --compacted:", {k: result[k] for k in ("faults", "writes", "records_read", "anomalies")})
    assert result["compacted"] and len(result["faults"]) >= 2, result
    assert not any(result["anomalies"].values()), result
    assert result["replicas_identical"], result
    assert not any(result["group"]["anomalies"].values()), result["group"]
    ok = result["writes"].get("ok", 0)
    assert ok > 1000, result["writes"]
    # The cleaner did run: the full read holds far fewer records than were acknowledged.
    assert result["records_read"] < ok // 2, result
    assert r.returncode == 0, r.stdout
