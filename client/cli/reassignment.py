"""The reassignment JSON files of ``minikafka reassign-partitions`` (kafka-reassign-partitions), pure.

Theory of operation: the tool works on two Kafka file formats. A *topics-to-move* file,
``{"version": 1, "topics": [{"topic": "orders"}]}``, names what ``--generate`` should spread over
``--broker-list``; a *reassignment* file, ``{"version": 1, "partitions": [{"topic": "orders",
"partition": 0, "replicas": [2, 3, 1]}]}``, is what ``--generate`` prints (as the current and the
proposed assignment) and what ``--execute`` submits; the first replica listed is the preferred
leader. ``--generate`` places replicas exactly as topic creation does (controller.assignment: replica
j of partition i on ``sorted(brokers)[(i + j) mod n]``), keeping each partition's replication
factor. Parsing errors are reported as one line naming what is wrong; nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from client.structs import TopicPartition
from controller.assignment import assign_replicas
from proto import errors

Assignment = dict[TopicPartition, list[int]]


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise errors.InvalidRequestError(f"the {what} file is not JSON: {e}") from None


def parse_reassignment(text: str) -> Assignment:
    doc = _load(text, "reassignment")
    try:
        out: Assignment = {}
        for e in doc["partitions"]:
            tp = TopicPartition(str(e["topic"]), int(e["partition"]))
            if tp in out:
                raise errors.InvalidRequestError(f"{tp.topic}-{tp.partition} is listed twice")
            out[tp] = [int(b) for b in e["replicas"]]
    except (KeyError, TypeError, ValueError) as e:
        raise errors.InvalidRequestError(
            f'cannot read the reassignment file: expected {{"version": 1, "partitions": [{{"topic": T, '
            f'"partition": P, "replicas": [ids]}}]}} ({type(e).__name__}: {e})') from None
    if not out:
        raise errors.InvalidRequestError("the reassignment file lists no partitions")
    return out


def parse_topics_to_move(text: str) -> list[str]:
    doc = _load(text, "topics-to-move")
    try:
        topics = [str(e["topic"]) for e in doc["topics"]]
    except (KeyError, TypeError) as e:
        raise errors.InvalidRequestError(
            f'cannot read the topics-to-move file: expected {{"version": 1, "topics": [{{"topic": T}}]}} '
            f"({type(e).__name__}: {e})") from None
    if not topics:
        raise errors.InvalidRequestError("the topics-to-move file lists no topics")
    return list(dict.fromkeys(topics))


def parse_broker_list(text: str | None) -> list[int]:
    if not text:
        raise errors.InvalidRequestError("--generate needs --broker-list ID,ID,...")
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise errors.InvalidRequestError(f"--broker-list: expected broker ids like 1,2,3, got {text!r}") from None
    if not ids:
        raise errors.InvalidRequestError("--broker-list is empty")
    return sorted(set(ids))


def propose(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[int]) -> Assignment:
    """Each topic of ``current`` spread over ``brokers`` with its replication factor kept."""
    by_topic: dict[str, dict[int, int]] = {}
    for tp, replicas in current.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = len(replicas)
    out: Assignment = {}
    for topic, rfs in sorted(by_topic.items()):
        rf = max(rfs.values())
        placed = assign_replicas(brokers, max(rfs) + 1, rf)
        for p in sorted(rfs):
            out[TopicPartition(topic, p)] = placed[p]
    return out


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's one-line JSON, ready to save as --reassignment-json-file."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)} for tp, r in sorted(assignment.items())]})
