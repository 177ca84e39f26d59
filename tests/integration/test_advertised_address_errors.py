"""A broker told to advertise an address nobody can connect to stops at start with one clear line
(exit code 2, a configuration error; issue 32 - Kafka's KafkaConfig refuses the same), instead of
registering an address that sends other brokers and clients nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TEST_BROKER_CONFIG, TEST_ZK_DIGEST

from client.ops.local_cluster import ClusterError, LocalCluster

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("override, says", [
    ({"advertised.listeners": "CLIENT://0.0.0.0:9092"},
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"),
    ({"advertised.listeners": "OUTSIDE://203.0.113.7:9092"},
     "listener name 'OUTSIDE' is not in listeners"),
])
def test_a_wrong_advertised_address_stops_the_broker_at_start(tmp_path: Path, zk_connect: str,
                                                              override: dict[str, str], says: str) -> None:
    c = LocalCluster(tmp_path / "cluster", zookeeper=zk_connect, broker_overrides={**TEST_BROKER_CONFIG, **override},
                     zk_digest=TEST_ZK_DIGEST)
    try:
        with pytest.raises(ClusterError, match="broker 1 exited with 2") as e:
            c.up(1, timeout_s=60)
        assert says in str(e.value)
    finally:
        c.down(timeout_s=10)
