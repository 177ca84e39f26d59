"""The ZooKeeper gateway (Kafka's ``kafka.zk``): every znode path and JSON schema (``zk.data``) and
the kazoo-backed client that broker, controller and tools share (``zk.client``). Its own package,
not the wire package ``proto``: ZooKeeper is the cluster's metadata store, not a protocol clients speak."""
