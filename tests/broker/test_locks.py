"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ and the RebalanceLockManager behind them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.locks import RebalanceLockManager
from ledgermq.clock import ManualClock
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import RequestCode, ResponseCode
from tests.broker.harness import Harness, running_broker

Q = [MessageQueue("Ord", "broker-a", i) for i in range(3)]


# -- the manager ------------------------------------------------------------------------
def test_manager_grants_refuses_renews_and_expires() -> None:
    clock = ManualClock()
    locks = RebalanceLockManager(clock, max_live_ms=60_000)
    assert locks.try_lock_batch("g", Q, "A") == set(Q)
    assert locks.try_lock_batch("g", Q, "B") == set()
    assert locks.try_lock_batch("other-group", Q, "B") == set(Q)  # groups are separate

    clock.advance(50)
    assert locks.try_lock_batch("g", Q[:1], "A") == {Q[0]}  # renewal
    clock.advance(20)  # Q[1], Q[2] unrenewed for 70 s: expired; Q[0] renewed 20 s ago
    assert locks.try_lock_batch("g", Q, "B") == {Q[1], Q[2]}
    assert locks.owner("g", Q[0]) == "A" and locks.owner("g", Q[1]) == "B"

    locks.unlock_batch("g", Q, "A")  # releases only what A holds
    assert locks.owner("g", Q[0]) is None and locks.owner("g", Q[2]) == "B"
    clock.advance(61)
    assert locks.owner("g", Q[2]) is None  # expired
    locks.unlock_batch("g", Q, "B")  # an expired lock of one's own is released too
    assert "g" not in locks.table
    locks.unlock_batch("missing", Q, "B")  # no such group: nothing happens


# -- over the wire ----------------------------------------------------------------------
def body(client_id: str, queues: list[MessageQueue], group: str = "og") -> bytes:
    return fastjson.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": [q.to_json() for q in queues]})


async def lock(h: Harness, client_id: str, queues: list[MessageQueue]) -> set[MessageQueue]:
    resp = await h.call(RequestCode.LOCK_BATCH_MQ, {}, body(client_id, queues))
    assert resp.code == ResponseCode.SUCCESS, resp
    doc: dict[str, Any] = fastjson.loads(resp.body)
    for item in doc["lockOKMQSet"]:
        assert isinstance(item["queueId"], int)  # the C++ client reads it with asInt
    return {MessageQueue.from_json(item) for item in doc["lockOKMQSet"]}


def test_lock_and_unlock_over_the_wire(tmp_path: Path) -> None:
    clock = ManualClock()

    def install(app: BrokerApp) -> None:
        app.broker.locks = RebalanceLockManager(clock, max_live_ms=60_000)

    async def main() -> None:
        async with running_broker(tmp_path, before_start=install) as h:
            assert await lock(h, "A", Q) == set(Q)
            resp = await h.call(RequestCode.LOCK_BATCH_MQ, {}, body("A", Q[:1]))
            assert resp.body == b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"Ord"}]}'
            assert await lock(h, "B", Q) == set()

            # B cannot unlock A's queues; A's unlock frees them for B.
            assert (await h.call(RequestCode.UNLOCK_BATCH_MQ, {}, body("B", Q))).code == ResponseCode.SUCCESS
            assert await lock(h, "B", Q) == set()
            unlock = await h.call(RequestCode.UNLOCK_BATCH_MQ, {}, body("A", Q[:2]))
            assert unlock.code == ResponseCode.SUCCESS and unlock.body == b""
            assert await lock(h, "B", Q) == set(Q[:2])

            # A lock not renewed within lockMaxLiveTime goes to whoever asks.
            clock.advance(61)
            assert await lock(h, "A", Q) == set(Q)

            # A C++-style body: trailing newline, queueId as a string.
            cpp = (
                b'{"clientId":"C","consumerGroup":"og2",'
                b'"mqSet":[{"brokerName":"broker-a","queueId":"1","topic":"Ord"}]}\n'
            )
            resp = await h.call(RequestCode.LOCK_BATCH_MQ, {}, cpp)
            assert fastjson.loads(resp.body) == {"lockOKMQSet": [Q[1].to_json()]}

    asyncio.run(main())


def test_default_manager_and_bad_bodies(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            assert await lock(h, "A", Q) == set(Q)
            assert h.app.broker.locks.max_live_s == 60.0
            assert await lock(h, "A", []) == set()
            bad_bodies = [
                b"",
                b"not json",
                b"[]",
                b'{"consumerGroup":"og","mqSet":[]}',
                b'{"clientId":"A","mqSet":[]}',
                b'{"clientId":"A","consumerGroup":"og","mqSet":{"a":1}}',
                b'{"clientId":"A","consumerGroup":"og","mqSet":[{"topic":"T"}]}',
                b'{"clientId":"A","consumerGroup":"og","mqSet":[{"topic":"T","queueId":"x"}]}',
            ]
            for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
                for bad in bad_bodies:
                    resp = await h.call(code, {}, bad)
                    assert resp.code == ResponseCode.SYSTEM_ERROR, (code, bad)
            assert h.app.broker.locks.owner("og", Q[0]) == "A"

    asyncio.run(main())
