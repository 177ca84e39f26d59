"""Which partitions of a Produce wait for the transaction coordinator's verification, and what a
failed verification answers (KIP-890 part 1: Kafka 3.6's ``ReplicaManager.appendRecords`` and
``AddPartitionsToTxnManager``), pure.

Theory of operation
-------------------
A transactional batch may open a transaction on a partition only if the producer added that
partition to its transaction at the coordinator (AddPartitionsToTxn): otherwise no marker will
ever close it and the partition's last stable offset is stuck for good (the "hanging
transaction"). So the leader, before appending, asks the coordinator of the request's
``transactional_id`` - for the partitions where the batch's producer has no transaction open yet
(``ProducerStateManager.maybe_start_verification``; an open transaction is the cache of an earlier
verification) - and appends only what it verified, each with the guard it took before asking.

This module is the request-level part, decided before anything waits:

* ``transactional_producer``: the producer (id, epoch) of a partition's transactional batches, from
  the batch headers alone (a hint: the log's validation reads the same bytes and refuses a
  transactional batch that was not verified whatever this says); ``MIXED`` when one partition
  holds several producers' transactional batches;
* ``judge_request``: the code the whole request is refused with - a transactional batch without a
  ``transactional_id`` is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka 2.8's KafkaApis: such a
  request cannot be authorized); with verification on, transactional batches of more than one
  producer are INVALID_PRODUCER_ID_MAPPING (Kafka 3.6: "Transactional records contained more than
  one producer ID"); else NONE and the one producer to verify for;
* ``produce_error``: the coordinator's answer as the producer must see it (Kafka 3.6):
  PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what producers handle on a produce), a refused
  inter-broker request (CLUSTER_AUTHORIZATION_FAILED) and a partition not in the transaction
  INVALID_TXN_STATE ("Partition was not added to the transaction"), and the coordinator being
  unreachable, moving, loading or busy preparing (NETWORK_EXCEPTION, REQUEST_TIMED_OUT,
  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
  CONCURRENT_TRANSACTIONS) NOT_ENOUGH_REPLICAS - retriable, and without a metadata refresh, which a
  produce's NOT_COORDINATOR would not be to older clients.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from proto import errors
from proto.record_batch import CONTROL_MASK, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_MASK

NONE: Final = 0
INVALID_TXN_STATE: Final = errors.InvalidTxnStateError.code
NOT_ENOUGH_REPLICAS: Final = errors.NotEnoughReplicasError.code
TXN_ID_AUTHORIZATION_FAILED: Final = errors.TransactionalIdAuthorizationFailedError.code
INVALID_PRODUCER_ID_MAPPING: Final = errors.InvalidProducerIdMappingError.code

# The verification could not be made (yet): the producer retries the batch.
UNVERIFIABLE: Final = frozenset({errors.NetworkError.code, errors.RequestTimedOutError.code,
                                 errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code,
                                 errors.CoordinatorLoadInProgressError.code,
                                 errors.ConcurrentTransactionsError.code})

_LENGTH: Final = struct.Struct(">i")  # batch_length at byte 8
_ATTRIBUTES: Final = struct.Struct(">h")  # at byte 21
_PRODUCER: Final = struct.Struct(">qh")  # producer id and epoch at byte 43
_ATTRIBUTES_AT: Final = 21
_PRODUCER_AT: Final = 43


@dataclass(frozen=True, slots=True)
class TxnProducer:
    producer_id: int
    producer_epoch: int


class _Mixed:
    def __repr__(self) -> str:
        return "MIXED"


MIXED: Final = _Mixed()  # one partition's transactional batches come from more than one producer
Peek = TxnProducer | _Mixed | None


def transactional_producer(records: bytes | memoryview) -> Peek:
    """The producer of the transactional data batches in ``records`` (None: there are none), from
    the headers only - two struct reads per batch, nothing decoded. Stops at bytes that do not
    frame a batch (validation refuses them later)."""
    found: TxnProducer | None = None
    pos, total = 0, len(records)
    while total - pos >= HEADER_SIZE:
        (attributes,) = _ATTRIBUTES.unpack_from(records, pos + _ATTRIBUTES_AT)
        if attributes & TRANSACTIONAL_MASK and not attributes & CONTROL_MASK:
            producer = TxnProducer(*_PRODUCER.unpack_from(records, pos + _PRODUCER_AT))
            if found is not None and found != producer:
                return MIXED
            found = producer
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            break
        pos += length + LOG_OVERHEAD
    return found


@dataclass(frozen=True, slots=True)
class RequestVerdict:
    """``refusal``: NONE, or the code every partition of the request is answered with;
    ``producer``: the one producer whose transactional batches the request carries (None: none)."""

    refusal: int
    producer: TxnProducer | None = None
    message: str = ""


def judge_request(transactional_id: str, peeks: Sequence[Peek], verification: bool) -> RequestVerdict:
    """The request-level rules (see the module docstring) over each partition's peek."""
    producers = {p for p in peeks if p is not None}
    if not producers:
        return RequestVerdict(NONE)
    if not transactional_id:
        return RequestVerdict(TXN_ID_AUTHORIZATION_FAILED, message=(
            "transactional records need the transactional id of their producer in the request"))
    if verification and (MIXED in producers or len(producers) > 1):
        return RequestVerdict(INVALID_PRODUCER_ID_MAPPING, message=(
            "transactional records contained more than one producer id"))
    only = next(iter(producers))
    return RequestVerdict(NONE, only if isinstance(only, TxnProducer) else None)


def produce_error(code: int) -> tuple[int, str]:
    """A verification's per-partition answer (NONE: verified) as the produce answers it: (code, message)."""
    if code == NONE:
        return NONE, ""
    if code == errors.ProducerFencedError.code:
        return errors.InvalidProducerEpochError.code, "the producer's epoch is fenced at the transaction coordinator"
    if code in (INVALID_TXN_STATE, errors.ClusterAuthorizationFailedError.code):
        return INVALID_TXN_STATE, "Partition was not added to the transaction"
    if code in UNVERIFIABLE:
        return NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the transaction. "
                                     f"Underlying error: {errors.for_code(code).name}")
    return code, f"the transaction coordinator refused the verification: {errors.for_code(code).name}"
