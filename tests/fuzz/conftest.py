"""Fuzz suite fixtures (issue 12: hostile input).

Each module shares one 3-broker cluster (``module_cluster`` of tests/conftest.py, with its short
ZooKeeper session timeouts) through a ``Harness`` (fuzz_support.py). The hypothesis profile is
chosen by MINIKAFKA_FUZZ_PROFILE (``short``, the default, for `make test`; ``long`` for
`make fuzz`, which also kills and restarts the leader every MINIKAFKA_FUZZ_KILL_EVERY examples,
default 40, besides the restart that ends every test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_support import Harness, profile


@pytest.fixture(scope="module")
def fuzz_harness(module_cluster, tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
                 request: pytest.FixtureRequest) -> Iterator[Harness]:
    kill_every = int(os.environ.get("MINIKAFKA_FUZZ_KILL_EVERY", "40")) if profile() == "long" else 0
    outside: Path = tmp_path_factory.mktemp("outside-log-dirs")
    h = Harness(module_cluster.cluster, module_cluster.view(), request.module.__name__, kill_every=kill_every,
                sacrificial_root=outside)
    h.setup()
    yield h


@pytest.fixture
def fuzz(fuzz_harness: Harness, request: pytest.FixtureRequest) -> Harness:
    fuzz_harness.test_name = request.node.name
    fuzz_harness.failures = []
    return fuzz_harness
