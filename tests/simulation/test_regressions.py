"""Each defect of issue 14 (items 1-5) first appears as a failing seed: with the old behaviour put
back (tests/simulation/legacy.py), the simulation finds a violated invariant within a few dozen
seeds - and with today's code the same seeds pass (test_simulation runs them).

Item 6 (failed events dropped half-applied, ``active`` before the load) cannot be put back in
the plan/commit structure in a way the seeds see often, and item 7 is a race inside one gateway
call: their failing-first tests are tests/unit/test_controller_shell.py and
tests/unit/test_zk_gateway.py, next to those of three defects the simulation found (watches
after a reconnect, an election that failed for good, a lost reply to a commit that wrote one
path twice - this one lost acknowledged records in seed 435 with the old check). A fourth one,
a broker refusing its own new broker epoch after a lost registration reply, is a seed test here
(test_broker_epoch_race_found_by_the_simulation)."""

from __future__ import annotations

from collections.abc import Callable

import legacy
import pytest
import sim_cluster
from sim_cluster import InvariantViolation, SimConfig, config_for, run_seed

import controller.controller as controller_module
import controller.partition_state_machine as psm
import controller.reassignment as reassignment
from broker.replication import control
from zk.client import KafkaZkClient


def first_violation(seeds: range, adjust: Callable[[SimConfig], SimConfig] = lambda c: c) -> tuple[int, str]:
    for seed in seeds:
        try:
            run_seed(seed, adjust(config_for(seed)))
        except InvariantViolation as e:
            return seed, str(e).split("\n")[0]
    raise AssertionError(f"no seed in {seeds} violated an invariant")


def test_item1_acks_all_below_min_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_cluster, "delayed_produce_outcome", legacy.delayed_produce_outcome)
    _seed, what = first_violation(range(60))
    assert "acks=all acknowledged" in what and "with ISR" in what


def test_item2_stuck_isr_after_a_lost_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KafkaZkClient, "update_partition_state", legacy.update_partition_state)
    monkeypatch.setattr(control, "adopt_after_isr_conflict", legacy.adopt_after_isr_conflict)
    _seed, what = first_violation(range(200))
    assert "did not settle" in what or "ISR" in what or "lost" in what


def test_item3_no_controller_after_a_lost_create_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KafkaZkClient, "register_controller_and_increment_epoch",
                        legacy.register_controller_and_increment_epoch)
    _seed, what = first_violation(range(120))
    assert "did not settle" in what or "no leader" in what


def test_item4_reassigned_replicas_without_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psm, "replica_transition", legacy.replica_transition)
    monkeypatch.setattr(controller_module, "replica_transition", legacy.replica_transition)
    monkeypatch.setattr(reassignment, "replica_transition", legacy.reassignment_replica_transition)
    _seed, what = first_violation(range(100))
    assert "IllegalStateTransition" in what


def test_item5_zombie_controller_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KafkaZkClient, "commit_guarded", legacy.commit_unguarded)
    put = controller_module.KafkaController.put
    monkeypatch.setattr(controller_module.KafkaController, "put",
                        lambda self, ev: legacy.put_expire_behind(self, ev) if self.events is None else put(self, ev))

    def old_kazoo(cfg: SimConfig) -> SimConfig:
        cfg.ignore_expire = True  # kazoo's default: retry a call in a new session
        cfg.auto_renew_session = True
        return cfg

    _seed, what = first_violation(range(150), old_kazoo)
    assert "zombie controller" in what or "did not settle" in what


def test_broker_epoch_race_found_by_the_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A defect the simulation found (seed 1498 of the standard range; the chaos suite found it too):
    a broker that compares the controller's broker epoch only with the one it recorded refuses its
    own new registration's epoch after a lost registration reply, and the cluster never settles.
    Stormy ZooKeeper weather brings it out within a few hundred seeds; today's code passes the
    same seeds (checked with 400 of them)."""
    monkeypatch.setattr(sim_cluster.SimBroker, "_fence", legacy.strict_broker_epoch_fence)

    def stormy(cfg: SimConfig) -> SimConfig:
        cfg.p_zk_fault = 0.2
        cfg.p_fault = 0.08
        return cfg

    _seed, what = first_violation(range(400), stormy)
    assert "did not settle" in what


def test_the_stormy_seeds_pass_today() -> None:
    for seed in range(0, 400, 7):  # a sample of the range above, to keep the suite short
        cfg = config_for(seed)
        cfg.p_zk_fault, cfg.p_fault = 0.2, 0.08
        run_seed(seed, cfg)
