"""Whether the topic a tool names exists, asked of the cluster before reading or writing it.

Shared by ``consume``, ``produce`` and ``perf``: as kafka-console-consumer and the perf-test tools, a
missing topic is reported in one line, and a produce that the brokers' auto.create.topics.enable
turns into a new topic says so.
"""

from __future__ import annotations

import argparse
import sys

from client.cli.tool_args import bootstrap_from_args, security_from_args
from client.connection import ClusterView
from proto import errors


def _topic_exists(args: argparse.Namespace, topic: str, allow_auto_create: bool = False) -> bool:
    """Asks the cluster (a metadata request); with ``allow_auto_create`` a broker with
    auto.create.topics.enable creates the topic, as the producer's own request would."""
    view = ClusterView(bootstrap_from_args(args), security=security_from_args(args))
    try:
        view.refresh([topic], allow_auto_create=allow_auto_create)
        return view.topic_errors.get(topic) != errors.UnknownTopicOrPartitionError.code
    finally:
        view.close()


def require_topic(args: argparse.Namespace, topic: str) -> None:
    """Reading a topic that does not exist is a mistake to report, not an empty result to wait on."""
    if not _topic_exists(args, topic):
        raise errors.UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist (list them: minikafka topics --list; create it: "
            f"minikafka topics --create --topic {topic})")


def ensure_topic_for_produce(args: argparse.Namespace, topic: str) -> None:
    """Producing to a missing topic creates it where the brokers have auto.create.topics.enable
    (Kafka's default, so a typo makes a topic): say so in one line; where they do not, refuse."""
    if _topic_exists(args, topic):
        return
    if not _topic_exists(args, topic, allow_auto_create=True):
        raise errors.UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist and the brokers do not create topics on use "
            f"(auto.create.topics.enable=false); create it: minikafka topics --create --topic {topic}")
    print(f"notice: topic {topic!r} did not exist; the broker created it (auto.create.topics.enable=true, "
          f"with num.partitions and default.replication.factor)", file=sys.stderr)
