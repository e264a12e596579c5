"""The producer's glue for following a moving master (``failover``), with its transport and
route lookups stubbed: the old master ``A`` never answers (a stopped process), the route
names ``B`` from the third lookup on. Every kind of send — sync, batch, async, orderly,
queue-selected — must be abandoned on ``A`` and answered by ``B`` on the queue it was
meant for, well within its timeout; with ``FailoverSettings(enabled=False)`` it waits its
timeout out on ``A``. Real processes: tests/ha/test_dledger_process.py.

The producer runs on a virtual-time loop with the loop's clock (tests/virtual_time.py), so
"within its timeout" and "waits its timeout out" are checked on the times the producer
itself decided, however busy the machine is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ledgermq.client import FailoverSettings, Message, MQConnectError, Producer, SendStatus
from ledgermq.client.errors import NoRouteError, NoWritableMasterError
from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import BrokerData, TopicRouteData
from tests.virtual_time import LoopClock, now, run_virtual

pytestmark = pytest.mark.timeout(30)

TOPIC = "Moving"
GROUP = "g"
QUEUES = [MessageQueue(TOPIC, GROUP, q) for q in range(4)]
FAST = FailoverSettings(stall_after=0.05, route_poll_interval=0.02, backoff_initial=0.02, backoff_max=0.1)


class Stub:
    """The transport and route lookups of one producer."""

    def __init__(self, p: Producer, move_at: int = 3, between_masters: bool = False) -> None:
        self.p = p
        self.move_at = move_at
        self.lookups = 0
        self.sent: list[tuple[str, int]] = []  # (address, queue id) of every attempt
        p.routes.routes[TOPIC] = TopicRouteData()
        if between_masters:  # the old master is gone from the route, no new one yet
            p.routes.broker_addrs = {GROUP: {2: "C"}}
            p.routes.publish[TOPIC] = TopicPublishInfo(TOPIC, [])
        else:
            p.routes.broker_addrs = {GROUP: {0: "A"}}
            p.routes.publish[TOPIC] = TopicPublishInfo(TOPIC, list(QUEUES))
        p.remoting.invoke = self.invoke  # type: ignore[method-assign]
        p.routes.update = self.update  # type: ignore[method-assign]

    async def update(self, topic: str, *, use_default: bool = False) -> bool:
        await asyncio.sleep(0.002)
        self.lookups += 1
        if self.lookups >= self.move_at:
            self.p.routes.broker_addrs = {GROUP: {0: "B"}}
            self.p.routes.publish[TOPIC] = TopicPublishInfo(TOPIC, list(QUEUES))
        return True

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        self.sent.append((addr, int(cmd.ext_fields["e"])))
        if addr == "A":
            await asyncio.sleep(timeout)
            raise MQConnectError(f"no answer from {addr}", addr, timeout=True)
        ext = {"queueId": cmd.ext_fields["e"], "queueOffset": 7, "msgId": "0A"}
        return cmd.response(ResponseCode.SUCCESS, ext_fields=ext)


@asynccontextmanager
async def stubbed(between_masters: bool = False, **kw: Any) -> AsyncIterator[tuple[Producer, Stub]]:
    kw.setdefault("failover", FAST)
    p = Producer("pg-move", "127.0.0.1:1", client_ip="127.0.0.1", send_timeout=2.0, clock=LoopClock(), **kw)
    p._state = "running"  # started without a name server: the stub is the network
    try:
        yield p, Stub(p, between_masters=between_masters)
    finally:
        p._state = "shut down"
        await p.instance.release()


def run(body: Callable[[], Awaitable[None]]) -> None:
    run_virtual(body())


def pick_third(queues: Any, msg: Any, arg: Any) -> MessageQueue:
    return list(queues)[2]


SENDS: dict[str, Callable[[Producer], Awaitable[Any]]] = {
    "sync": lambda p: p.send(Message(TOPIC, b"x")),
    "batch": lambda p: p.send_batch([Message(TOPIC, b"a"), Message(TOPIC, b"b")]),
    "async": lambda p: p.send_async(Message(TOPIC, b"x")),
    "batch_async": lambda p: p.send_batch_async([Message(TOPIC, b"a")]),
    "orderly": lambda p: p.send_orderly(Message(TOPIC, b"x"), pick_third, None),
    "orderly_async": lambda p: p.send_orderly_async(Message(TOPIC, b"x"), pick_third, None),
    "to_queue": lambda p: p.send_to_queue(Message(TOPIC, b"x"), QUEUES[2]),
    "to_queue_async": lambda p: p.send_to_queue_async(Message(TOPIC, b"x"), QUEUES[2]),
}


@pytest.mark.parametrize("kind", sorted(SENDS))
def test_every_kind_of_send_leaves_a_stalled_master_for_the_new_one(kind: str) -> None:
    async def body() -> None:
        async with stubbed() as (p, stub):
            started = now()
            result = await SENDS[kind](p)
            took = now() - started
            assert result.status is SendStatus.SEND_OK
            assert [addr for addr, _ in stub.sent] == ["A", "B"]
            assert stub.sent[0][1] == stub.sent[1][1] == result.queue.queue_id  # the same queue
            if "orderly" in kind or "to_queue" in kind:
                assert result.queue == QUEUES[2]
            # stalled 50 ms on A, then lookups every 20 ms (2 ms each) until the third named B,
            # which answered at once: nowhere near the 2 s send timeout
            assert stub.lookups == 3 and took == pytest.approx(0.05 + 2 * 0.02 + 0.002)

    run(body)


def test_disabled_failover_waits_the_timeout_on_the_stalled_master() -> None:
    async def body() -> None:
        async with stubbed(failover=FailoverSettings(enabled=False), retry_times=0) as (p, stub):
            started = now()
            with pytest.raises(Exception) as info:
                await p.send(Message(TOPIC, b"x"))
            # the whole 2 s send timeout on A (and one 2 ms lookup after it), no earlier
            assert now() - started == pytest.approx(2.0, abs=0.005)
            assert "A" in str(info.value.__cause__) and stub.sent == [("A", stub.sent[0][1])]

    run(body)


@pytest.mark.parametrize("kind", ["sync", "async", "orderly", "batch"])
def test_a_send_that_finds_no_master_in_the_route_waits_for_one(kind: str) -> None:
    async def body() -> None:
        async with stubbed(between_masters=True) as (p, stub):
            started = now()
            result = await SENDS[kind](p)
            assert result.status is SendStatus.SEND_OK and [a for a, _ in stub.sent] == ["B"]
            # lookups every 20 ms (2 ms each) until the third named B, then sent at once
            assert stub.lookups == 3 and now() - started == pytest.approx(2 * 0.02 + 0.002)

    run(body)


def test_without_failover_a_send_that_finds_no_master_fails_at_once() -> None:
    async def body() -> None:
        async with stubbed(between_masters=True, failover=FailoverSettings(enabled=False)) as (p, stub):
            stub.move_at = 100
            with pytest.raises(NoRouteError):
                await p.send(Message(TOPIC, b"x"))
            assert stub.sent == []

    run(body)


def test_an_attempt_on_a_group_without_master_waits_for_one_and_is_no_failure() -> None:
    async def body() -> None:
        async with stubbed(retry_times=0) as (p, stub):
            p.routes.broker_addrs = {GROUP: {2: "C"}}  # the route still has queues, but no master
            started = now()
            result = await p.send(Message(TOPIC, b"x"))  # one attempt allowed: none failed
            assert result.status is SendStatus.SEND_OK and [a for a, _ in stub.sent] == ["B"]
            assert stub.lookups == 3 and now() - started == pytest.approx(2 * 0.02 + 0.002)

    run(body)


def test_a_group_that_stays_without_a_master_is_named_in_the_error() -> None:
    """Controller mode between masters (election in progress): the route knows the topic and its group, but no
    master; the send says so instead of "no route info of topic"."""

    async def body() -> None:
        async with stubbed(between_masters=True) as (p, stub):
            stub.move_at = 10**6  # the new master never registers
            p.routes.routes[TOPIC] = TopicRouteData(broker_datas=[BrokerData("DefaultCluster", GROUP, {2: "C"})])
            with pytest.raises(NoRouteError) as info:
                await p.send(Message(TOPIC, b"x"))
            assert isinstance(info.value, NoWritableMasterError)
            assert f"broker group {GROUP} of topic {TOPIC} has no writable master now" in str(info.value)
            assert "no route info" not in str(info.value) and stub.sent == []

    run(body)
