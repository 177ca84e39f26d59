"""The minikafka client library, named as kafka-python users expect::

    from client import Producer, Consumer, AdminClient, TopicPartition

``client/`` is split by audience: the library is this package's top level (``producer``,
``consumer``, ``admin``, ``connection``, ``partitioner``, ``discovery``, ``structs``, ``spark``);
the ``minikafka`` command line is ``client.cli``; operations tooling (local cluster launcher,
chaos, history checker, verify-replicas, healthcheck, certificates, demos) is ``client.ops``.
The library imports neither of those nor ``broker``.
"""

from __future__ import annotations

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer, ConsumerRecord
from client.producer import Producer
from client.structs import TopicPartition

__all__ = ["AdminClient", "Consumer", "ConsumerRecord", "NewTopic", "Producer", "TopicPartition"]
