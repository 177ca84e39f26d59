"""Names that cross the wire: what a topic name, a partition index and a group id may be.

Theory of operation: a name arrives in a request, becomes a ZooKeeper path component
(``/brokers/topics/[topic]``) and a directory name (``<log.dir>/[topic]-[partition]``), so it is
checked wherever it enters - every RPC, every CLI command (SPEC S13.3) - against Kafka's rules
(``Topic.validate``): ASCII letters, digits, ``.``, ``_`` and ``-``, at most 249 characters, not
``.`` or ``..``. A name that passes can be neither a path nor a path component with a meaning.
Paths built from names are checked again where files are touched (``broker.log.manager``).
"""

from __future__ import annotations

import re
from typing import Final

from proto.errors import InvalidGroupIdError, InvalidPartitionsError, InvalidTopicError

MAX_TOPIC_LENGTH: Final = 249
LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")
# Partition indexes are int32 on the wire (Kafka's), and a directory suffix.
MAX_PARTITION: Final = (1 << 31) - 1
MAX_GROUP_ID_LENGTH: Final = 249
# A group id becomes a ZooKeeper path component under /consumers: no '/', no control characters.
ILLEGAL_GROUP_CHARS: Final = re.compile(r"[/\x00-\x1f\x7f]")

# A partition as brokers and the controller key it: (topic, partition index). One alias for all of
# them (the client's TopicPartition is a NamedTuple of the same shape, client.structs).
TopicPartition = tuple[str, int]


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (None when it is)."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_LENGTH} characters"
    if not LEGAL_TOPIC.fullmatch(name):
        return f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed"
    return None


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError (INVALID_TOPIC_EXCEPTION) unless ``name`` is a legal topic name."""
    reason = topic_name_error(name)
    if reason is not None:
        raise InvalidTopicError(reason)


def validate_partition(partition: int) -> None:
    if not 0 <= partition <= MAX_PARTITION:
        raise InvalidPartitionsError(f"partition {partition} is not in [0, {MAX_PARTITION}]")


def validate_group_id(group_id: str) -> None:
    """Raise InvalidGroupIdError unless ``group_id`` can be a consumer group's name."""
    if not group_id or group_id in (".", ".."):
        raise InvalidGroupIdError(f"group id {group_id!r} is not valid")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupIdError(f"group id is longer than {MAX_GROUP_ID_LENGTH} characters")
    if ILLEGAL_GROUP_CHARS.search(group_id):
        raise InvalidGroupIdError(f"group id {group_id!r} contains '/' or a control character")
