"""Kafka's default partitioner (SPEC S5.3): explicit partition, else murmur2 of the key, else sticky."""

from __future__ import annotations

import random

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (signed 32-bit result), byte for byte."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & ~3
    rem = length % 4
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Keyless records stick to one partition until its batch is full, then move on (KIP-480)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        # topic -> its sticky partition. Read directly by Producer.send() (one dict lookup per record
        # instead of a method call); written only here.
        self.current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self.current.get(topic)
        if p is None or p >= num_partitions:
            p = self._rng.randrange(num_partitions)
            self.current[topic] = p
        return p

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> int:
        if num_partitions > 1:
            choices = [p for p in range(num_partitions) if p != previous]
            p = self._rng.choice(choices)
        else:
            p = 0
        self.current[topic] = p
        return p
