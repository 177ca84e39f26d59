"""The request boundary (SPEC S13.2, S13.4): per-entry verdicts and the produce byte budget."""

from __future__ import annotations

import asyncio

from broker.network.request_guard import ByteBudget, error_response, judge_names, judge_partitions
from proto import minikafka_pb2 as pb

E = pb.ErrorCode


def test_each_entry_gets_its_own_verdict() -> None:
    verdicts = judge_partitions([("ok", 0), ("a/b", 0), ("ok", -1), ("dup", 1), ("ok", 1), ("dup", 1)], 100)
    assert verdicts == [E.NONE, E.INVALID_TOPIC_EXCEPTION, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_REQUEST, E.NONE,
                        E.INVALID_REQUEST]
    assert judge_partitions([("t", p) for p in range(11)], 10) == [E.INVALID_REQUEST] * 11
    assert judge_names(["t", "..", "t", "u"], 10) == [E.INVALID_REQUEST, E.INVALID_TOPIC_EXCEPTION,
                                                      E.INVALID_REQUEST, E.NONE]


def test_error_response_mirrors_the_request() -> None:
    req = pb.FetchRequest(topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=p)
                                                                      for p in (0, 3)])])
    resp = error_response("Fetch", req, -1)
    assert [(p.partition, p.error_code) for p in resp.topics[0].partitions] == [(0, -1), (3, -1)]
    # Every call of every service has a typed fallback answer: none may end in gRPC UNKNOWN (S13.2).
    for service in ("KafkaApi", "BrokerControl", "ControllerApi"):
        for name, method in pb.DESCRIPTOR.services_by_name[service].methods_by_name.items():
            answer = error_response(name, getattr(pb, method.input_type.name)(), 42)
            assert type(answer).__name__ == method.output_type.name, name


def test_byte_budget_waits_for_room_and_lets_an_oversized_request_through_alone() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        events: list[str] = []
        assert await budget.acquire(80, 1)
        assert not await budget.acquire(30, 0.05)  # no room, and the wait is bounded

        async def later() -> None:
            assert await budget.acquire(30, 5)
            events.append("second")

        task = asyncio.create_task(later())
        await asyncio.sleep(0.05)
        events.append("release")
        await budget.release(80)
        await task
        await budget.release(30)
        assert await budget.acquire(500, 1)  # larger than the budget: alone, never forever
        await budget.release(500)
        unbounded = ByteBudget(-1)
        assert await unbounded.acquire(10**9, 0)
        return events

    assert asyncio.run(scenario()) == ["release", "second"]


def test_byte_budget_takes_room_that_is_there_without_yielding_to_the_loop() -> None:
    """Every Produce and every Kafka-listener frame acquires: when the bytes fit, that must not cost
    loop iterations (asyncio.wait_for started a task each time: latency on every request)."""

    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        asyncio.get_running_loop().call_soon(order.append, "loop ran")
        assert await budget.acquire(60, 1)
        assert await budget.acquire(40, 1)
        order.append("acquired")
        await budget.release(100)
        await asyncio.sleep(0)
        return order

    assert asyncio.run(scenario()) == ["acquired", "loop ran"]


def test_a_lost_zookeeper_session_is_a_retriable_answer_not_an_unknown_error() -> None:
    """A broker resumed after a pause meets its expired session mid-request (seen in the chaos
    Ctrl-C test): the admin request gets REQUEST_TIMED_OUT, which clients retry."""
    from kazoo.exceptions import ConnectionLoss, SessionExpiredError

    from broker.server.kafka_apis import answer_typed

    async def fails(e: Exception) -> pb.DeleteTopicsResponse:
        raise e

    req = pb.DeleteTopicsRequest(topic_names=["t"])
    for e in (SessionExpiredError(), ConnectionLoss()):
        resp = asyncio.run(answer_typed("DeleteTopics", fails(e), req))
        assert [r.error_code for r in resp.responses] == [pb.ErrorCode.REQUEST_TIMED_OUT]
    resp = asyncio.run(answer_typed("DeleteTopics", fails(RuntimeError("bug")), req))
    assert [r.error_code for r in resp.responses] == [pb.ErrorCode.UNKNOWN_SERVER_ERROR]
