"""The deterministic simulation (issue 14): many seeds, every invariant, replayable.

``make test`` runs ``MINIKAFKA_SIM_SEEDS`` seeds (default 2000) in chunks; a failing seed is
printed with the last steps of its trace and the command that replays it alone:

    .venv/bin/pytest tests/simulation --sim-seed N

Invariants (checked by ``sim_cluster.Simulation``): one acting controller per controller epoch;
no controller write after a newer controller's (the epoch in a state znode never goes down);
acks=all never acknowledged with the ISR below min.insync.replicas nor for a record missing
from the leader's log; a leader's high watermark never decreases; no controller event fails for
another reason than ZooKeeper's; once the faults heal, every partition has a leader within a
bounded number of steps, ZooKeeper's ISR and the leader's agree, every replica is back in the
ISR, and every acknowledged record is in the leader's log at its offset; the topic znode's
KIP-455 fields (adding/removing replicas) are well formed, the ISR is within the replica set, and no
reassignment whose target replicas are all in sync is left hanging (issue 30).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sim_cluster import InvariantViolation, Simulation, config_for, run_seed

SEEDS = int(os.environ.get("MINIKAFKA_SIM_SEEDS", "2000"))
CHUNK = 250
HERE = Path(__file__).resolve().parent


def _replay_hint(seed: int) -> str:
    return f"replay: .venv/bin/pytest tests/simulation --sim-seed {seed}"


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK), ids=lambda f: f"seeds{f}-{min(f + CHUNK, SEEDS) - 1}")
def test_seeds(first: int, sim_seed: int | None) -> None:
    if sim_seed is not None:
        pytest.skip("--sim-seed given: only test_replay runs")
    for seed in range(first, min(first + CHUNK, SEEDS)):
        try:
            run_seed(seed)
        except InvariantViolation as e:
            pytest.fail(f"{e}\n{_replay_hint(seed)}", pytrace=False)
        except Exception as e:  # a crash of the code under test is a failure of that seed too
            raise AssertionError(f"seed {seed} raised {type(e).__name__}: {e}\n{_replay_hint(seed)}") from e


def test_replay(sim_seed: int | None) -> None:
    """``--sim-seed N``: run that seed alone and print its whole trace."""
    if sim_seed is None:
        pytest.skip("give --sim-seed N to replay a seed")
    sim = Simulation(sim_seed, config_for(sim_seed))
    try:
        sim.run()
    finally:
        print(f"seed {sim_seed}: {sim.cfg}")
        print("\n".join(sim.trace))


def test_same_seed_same_run() -> None:
    a, b = run_seed(7), run_seed(7)
    assert a.trace == b.trace and a.acked == b.acked and a.step_no == b.step_no


def test_seeds_differ() -> None:
    assert run_seed(1).trace != run_seed(2).trace


def test_replay_does_not_depend_on_the_hash_seed() -> None:
    """A seed printed by one pytest process replays the same in another: the run must not depend on
    set or dict order of strings (PYTHONHASHSEED differs between processes)."""
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from sim_cluster import run_seed\n"
            "import hashlib; print(hashlib.sha256('\\n'.join(run_seed(11).trace).encode()).hexdigest())")
    outs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        res = subprocess.run([sys.executable, "-c", code, str(HERE), str(HERE.parent.parent)], env=env,
                             capture_output=True, text=True, timeout=120, check=True)
        outs.add(res.stdout.strip())
    assert len(outs) == 1


def test_seeds_that_cancel_a_running_reassignment() -> None:
    """Issue 30 (KIP-455): AlterPartitionReassignments reaches the controller during the faults - new
    targets, and cancels that revert a running reassignment to its original replicas; every
    invariant holds (with the topic znode's adding/removing replicas well formed and no
    reassignment left hanging once its target is in sync)."""
    cancelled = []
    for seed in (39, 137, 185):  # seeds whose trace has a cancel the controller accepted
        trace = run_seed(seed).trace
        cancelled += [line for line in trace if "admin: cancel reassignment of" in line and line.endswith(": NONE")]
    assert cancelled


def test_the_runs_see_faults_and_progress() -> None:
    """The seeds are not vacuous: across a few runs there are acknowledged records, controller
    changes, elections and every kind of fault."""
    traces = [run_seed(s) for s in range(12)]
    text = "\n".join("\n".join(t.trace) for t in traces)
    assert sum(len(v) for t in traces for v in t.acked.values()) > 100
    for what in ("fault crash", "fault restart", "fault pause", "fault cut", "fault expire", "fault zk_disconnect",
                 "admin: reassign", "admin: preferred", "Expire", "Reelect", "BrokerChange",
                 "PartitionReassignment", "LeaderAndIsr"):
        assert what in text, what
