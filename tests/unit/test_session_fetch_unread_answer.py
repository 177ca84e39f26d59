"""An answer a fetcher did not take is answered again (KIP-227 as Kafka's broker keeps it, SPEC S15):
Kafka's session reads every partition from its cached fetch offset on each incremental fetch, so a
consumer that dropped an answer - a rebalance or seek between a fetch's answer and the next poll -
and fetches again from the same offset, naming nothing, gets the records again. This broker reads
only partitions named or moved since its last answer, and so also keeps a partition answered with
records to read until a fetch names its next offset; before, such a consumer (Kafka's Java consumer
resuming from a committed offset after a rebalance; ours until it named them again) got nothing
more. A real replica manager on real logs, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_session_fetch_min_bytes import answered, batch, fetch, produce, replica_manager

from proto import minikafka_pb2 as pb

E = pb.ErrorCode


def test_records_not_taken_are_answered_again_until_the_fetch_names_a_new_offset(tmp_path: Path) -> None:
    async def run() -> None:
        rm = replica_manager(tmp_path)
        await produce(rm, 0, batch("a"))
        full = await rm.handle_fetch(fetch(0, 0, {0: 0, 1: 0}))
        sid = full.session_id
        assert sid and answered(full)[0][1] > 0
        # The consumer dropped that answer and fetches from offset 0 again: nothing named.
        again = await rm.handle_fetch(fetch(sid, 1, {}))
        assert answered(again) == {0: (E.NONE, answered(full)[0][1])}
        # It took them now and names its next offset: nothing new, nothing listed.
        assert answered(await rm.handle_fetch(fetch(sid, 2, {0: 1}))) == {}
        # New records answered on an incremental fetch, dropped, answered again; taken, quiet.
        await produce(rm, 1, batch("b"))
        first = answered(await rm.handle_fetch(fetch(sid, 3, {})))
        assert first == {1: (E.NONE, first[1][1])} and first[1][1] > 0
        assert answered(await rm.handle_fetch(fetch(sid, 4, {}))) == first
        assert answered(await rm.handle_fetch(fetch(sid, 5, {1: 1}))) == {}
        assert answered(await rm.handle_fetch(fetch(sid, 6, {}))) == {}

    asyncio.run(run())
