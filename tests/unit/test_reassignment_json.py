"""kafka-reassign-partitions' files (issue 17: --generate and the JSON format documented)."""

from __future__ import annotations

import json

import pytest

from client.cli.reassignment import (
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    propose,
)
from client.structs import TopicPartition as TP
from proto import errors


def test_round_trip_of_the_reassignment_format() -> None:
    text = '{"version": 1, "partitions": [{"topic": "a", "partition": 1, "replicas": [3, 1]}]}'
    plan = parse_reassignment(text)
    assert plan == {TP("a", 1): [3, 1]}
    assert json.loads(format_reassignment(plan)) == json.loads(text)


@pytest.mark.parametrize("text", ['{"partitions": [{"topic": "a"}]}', "[1]", "not json",
                                  '{"version": 1, "partitions": []}',
                                  '{"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},'
                                  ' {"topic": "a", "partition": 0, "replicas": [2]}]}'])
def test_bad_reassignment_files_are_one_clear_error(text: str) -> None:
    with pytest.raises(errors.InvalidRequestError) as e:
        parse_reassignment(text)
    assert "\n" not in str(e.value)


def test_topics_to_move_and_broker_list() -> None:
    assert parse_topics_to_move('{"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}, {"topic": "a"}]}') == ["a", "b"]
    with pytest.raises(errors.InvalidRequestError):
        parse_topics_to_move('{"topics": []}')
    assert parse_broker_list("3, 1,2") == [1, 2, 3]
    for bad in (None, "", "1,x"):
        with pytest.raises(errors.InvalidRequestError):
            parse_broker_list(bad)


def test_propose_keeps_replication_factor_and_places_as_topic_creation() -> None:
    current = {TP("a", 0): [1, 2], TP("a", 1): [2, 1], TP("b", 0): [1]}
    assert propose(current, [2, 3, 4]) == {TP("a", 0): [2, 3], TP("a", 1): [3, 4], TP("b", 0): [2]}
    with pytest.raises(errors.InvalidReplicationFactorError):
        propose(current, [4])  # a replication factor of 2 cannot fit on one broker
