"""Value types shared by the library's producer, consumer and admin client (kafka-python's
``kafka.structs``). Defined once here; ``from client import TopicPartition`` is the public name."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int
