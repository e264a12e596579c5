"""Guarantee 3 at the broker: one connection, many requests in flight, processing that
completes out of order, and every answer carries its request's opaque and its content.

A SYNC_MASTER broker (in this process, real sockets) with ``FakeSlave``, which
acknowledges only what the test says. One raw connection carries, in a seeded order and
with random opaques:

* SYNC_MASTER sends (WAIT=true) that wait for the slave's acknowledgement;
* sends with WAIT=false, answered at once although written after waiting ones;
* pulls held by long polling (one per queue of another topic), released one by one, in a
  seeded order, by sends on the same connection to their queue;
* plain pulls and QUERY_CONSUMER_OFFSET requests, answered at once, each for a queue whose
  content (message, committed offset) differs from every other queue's.

So answers leave in an order far from the requests': the at-once ones first, then each
held pull as its message arrives (while the sends still wait for the slave), then the
waiting sends as the slave acknowledges their bytes in three cuts. Each answer must be the
one for its opaque: a send's msgId and queue offset read back the body sent under that
opaque, a pull's records are its queue's, an offset query names its queue's offset.
(The master serves a pull before the slave has the message, as RocketMQ 4.x's does.)

The same mix on an ASYNC_MASTER / ASYNC_FLUSH broker, where no send waits for anything
(the path a send processor may answer without a task of its own), with only the held
pulls completing late.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from ledgermq.store.message_store import MessageStore
from tests.broker.harness import Harness, running_broker
from tests.guarantees.fake_slave import FakeSlave
from tests.guarantees.sends import QUEUES, body_for, send_request, stored_end
from tests.guarantees.wire import Answer, Pipe, stays, until

SENDS = "GuardMixSend"
PULLS = "GuardMixPull"
GROUP = "guard-cg"
SUBSCRIPTION, SUSPEND = 4, 2


def pull_request(queue_id: int, offset: int, opaque: int, *, hold: bool) -> RemotingCommand:
    header = {"consumerGroup": GROUP, "topic": PULLS, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
              "sysFlag": SUBSCRIPTION | (SUSPEND if hold else 0), "commitOffset": 0,
              "suspendTimeoutMillis": 30_000 if hold else 0, "subscription": "*", "subVersion": 0}  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header, opaque=opaque)


def offset_query(queue_id: int, opaque: int) -> RemotingCommand:
    header = {"consumerGroup": GROUP, "topic": PULLS, "queueId": queue_id}
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header, opaque=opaque)


def committed(queue_id: int) -> int:
    return 1000 + 7 * queue_id


@dataclass
class Plan:
    """The mixed requests of one test, in a seeded order, with what each one is."""

    rng: random.Random
    requests: list[RemotingCommand] = field(default_factory=list)
    kinds: dict[int, tuple[str, int]] = field(default_factory=dict)  # opaque -> (kind, n or queue)

    @classmethod
    def make(cls, seed: int, waiting: int, not_waiting: int) -> Plan:
        plan = cls(random.Random(seed))
        opaques = iter(plan.rng.sample(range(1, 2**31 - 1), 1000))
        for n in range(waiting):
            plan.add("wait", n, send_request(SENDS, n, body_for("wait", n), next(opaques)))
        for n in range(not_waiting):
            plan.add("nowait", n, send_request(SENDS, n, body_for("nowait", n), next(opaques), wait=False))
        for q in range(QUEUES):
            plan.add("held_pull", q, pull_request(q, 1, next(opaques), hold=True))
        for i in range(24):
            plan.add("pull", i % QUEUES, pull_request(i % QUEUES, 0, next(opaques), hold=False))
            plan.add("offset", i % QUEUES, offset_query(i % QUEUES, next(opaques)))
        plan.rng.shuffle(plan.requests)
        return plan

    def add(self, kind: str, which: int, request: RemotingCommand) -> None:
        self.requests.append(request)
        self.kinds[request.opaque] = (kind, which)

    def of(self, *kinds: str) -> set[int]:
        return {o for o, (k, _) in self.kinds.items() if k in kinds}

    @property
    def held_pulls(self) -> dict[int, int]:
        return {q: o for o, (k, q) in self.kinds.items() if k == "held_pull"}


async def set_up(h: Harness, pipe: Pipe) -> None:
    """Both topics exist; each pull queue holds one message and a committed offset of its own."""
    setup = [send_request(PULLS, q, body_for("seed", q), 900_000 + q, wait=False) for q in range(QUEUES)]
    setup.append(send_request(SENDS, 0, body_for("topic", 0), 900_100, wait=False))
    pipe.write(setup)
    await until(lambda: len(pipe.answers) == len(setup), 10, "the setup sends (WAIT=false)")
    for q in range(QUEUES):
        h.app.broker.offsets.commit(GROUP, PULLS, q, committed(q))
    assert await asyncio.to_thread(h.app.broker.store.wait_dispatched, None, 10.0)


async def release_held_pulls(plan: Plan, pipe: Pipe) -> None:
    """One by one in a seeded order, each by a send to its queue on the same connection."""
    held = plan.held_pulls
    order = list(range(QUEUES))
    plan.rng.shuffle(order)
    for i, q in enumerate(order):
        late = 800_000 + q
        pipe.write([send_request(PULLS, q, body_for("late", q), late, wait=False)])
        await until(lambda q=q, late=late: {held[q], late} <= set(pipe.answers), 10, f"held pull {q}")
        released = {o for o in pipe.answers if o in held.values()}
        assert released == {held[x] for x in order[: i + 1]}, "a held pull answered by another queue's message"


def check_answers(plan: Plan, pipe: Pipe, store: MessageStore, port: int, acked: Callable[[Answer, int], None]) -> None:
    """Every answer is its own request's: read back by msgId and queue offset, or by queue."""
    pipe.check_clean()
    assert set(pipe.answers) == set(pipe.sent)
    arrival = sorted(pipe.answers, key=lambda o: pipe.answers[o].seq)
    assert arrival != [cmd.opaque for cmd in plan.requests]  # the point: answers left out of order
    for opaque, answer in pipe.answers.items():
        request, resp = pipe.sent[opaque], answer.response
        kind, which = plan.kinds.get(opaque, ("setup", -1))
        if request.code == RequestCode.SEND_MESSAGE_V2:
            end = stored_end(store, port, request, resp)
            if kind == "wait":
                acked(answer, end)
        elif kind == "offset":
            assert resp.code == ResponseCode.SUCCESS, resp
            assert int(resp.ext_fields["offset"]) == committed(which), (which, resp.ext_fields)
        else:
            assert kind in ("pull", "held_pull"), kind
            assert resp.code == ResponseCode.SUCCESS, (kind, which, resp)
            # answered before the late messages (plain) / by its queue's late message (held)
            offset = 0 if kind == "pull" else 1
            body = body_for("seed" if kind == "pull" else "late", which)
            recs = [(r.topic, r.queue_id, r.queue_offset, r.body) for r in decode_records(resp.body)]
            assert recs == [(PULLS, which, offset, body)], (kind, which)
            assert int(resp.ext_fields["nextBeginOffset"]) == offset + 1


@pytest.mark.parametrize("seed", [3, 31])
def test_sync_master_connection_answers_each_request_with_its_own_content_whatever_finishes_first(
    tmp_path: Path, seed: int
) -> None:
    plan = Plan.make(seed, waiting=96, not_waiting=48)
    at_once, waiting = plan.of("nowait", "pull", "offset"), plan.of("wait")

    async def main() -> None:
        store_cfg = {"broker_role": BrokerRole.SYNC_MASTER, "sync_flush_timeout_ms": 30_000}
        async with running_broker(tmp_path, store=store_cfg) as h:
            store, port, ha = h.app.broker.store, h.app.port, h.app.broker.ha
            assert ha is not None
            slave = FakeSlave()
            pipe: Pipe | None = None
            try:
                await slave.connect(h.app.config.ha_port)
                await until(lambda: ha.connection_count == 1, 10, "the slave to connect")
                pipe = p = await Pipe.open(port, on_answer=lambda _resp: slave.reported)
                await set_up(h, p)
                base_records = len(slave.records())

                p.write(plan.requests)  # everything in flight at once, on one connection
                answered = lambda: set(p.answers)  # noqa: E731
                await until(lambda: at_once <= answered(), 10, lambda: f"{len(at_once - answered())} at-once left")
                await until(lambda: len(slave.records()) == base_records + 96 + 48, 10, "the sends at the slave")
                must_wait = waiting | set(plan.held_pulls.values())
                early = lambda: [plan.kinds[o] for o in answered() & must_wait]  # noqa: E731
                await stays(lambda: not early(), 0.2, lambda: f"answered too early: {early()}")

                await release_held_pulls(plan, p)
                assert not answered() & waiting, "a SYNC_MASTER send answered with nothing acknowledged"

                # The slave acknowledges in three cuts: exactly the covered sends are answered.
                records = slave.records()
                by_body = {body_for("wait", n): o for o, (k, n) in plan.kinds.items() if k == "wait"}
                mine = [(r.physical_offset + r.store_size, by_body[r.body]) for r in records if r.body in by_body]
                assert len(mine) == 96
                cuts = [mine[20][0], mine[61][0] - 1, records[-1].physical_offset + records[-1].store_size]
                for cut in cuts:
                    slave.report(cut)
                    expected = {o for end, o in mine if end <= cut}
                    await until(lambda e=expected: e <= answered(), 10, "the covered sends' answers")
                    assert answered() & waiting == expected
                    await stays(lambda e=expected: answered() & waiting == e, 0.05, "a send answered before its ack")
                assert not slave.problems, slave.problems
            finally:
                if pipe is not None:
                    await pipe.close()
                await slave.close()

            assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)

            def acked(answer: Answer, end: int) -> None:
                assert answer.seen >= end, f"answered at ack {answer.seen} < its end {end}"

            check_answers(plan, pipe, store, port, acked)

    asyncio.run(main())


def test_async_master_connection_answers_each_request_with_its_own_content(tmp_path: Path) -> None:
    plan = Plan.make(8, waiting=160, not_waiting=32)  # "wait" sends wait for nothing here
    at_once = plan.of("wait", "nowait", "pull", "offset")

    async def main() -> None:
        async with running_broker(tmp_path) as h:  # ASYNC_MASTER, ASYNC_FLUSH, no slave
            store, port = h.app.broker.store, h.app.port
            pipe = await Pipe.open(port)
            try:
                await set_up(h, pipe)
                pipe.write(plan.requests)
                await until(lambda: at_once <= set(pipe.answers), 10, "the answers that wait for nothing")
                held = set(plan.held_pulls.values())
                await stays(lambda: not held & set(pipe.answers), 0.1, "a held pull answered with no message")
                await release_held_pulls(plan, pipe)
            finally:
                await pipe.close()
            assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)
            check_answers(plan, pipe, store, port, lambda _answer, _end: None)

    asyncio.run(main())
