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
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records
from tests.broker.harness import running_broker
from tests.guarantees.fake_slave import FakeSlave
from tests.guarantees.sends import QUEUES, body_for, send_request, stored_end
from tests.guarantees.wire import Pipe, stays, until

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


@pytest.mark.parametrize("seed", [3, 31])
def test_one_connection_answers_each_request_with_its_own_content_whatever_finishes_first(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    opaques = iter(rng.sample(range(1, 2**31 - 1), 1000))
    kinds: dict[int, tuple[str, int]] = {}  # opaque -> (kind, queue or n)
    plan: list[RemotingCommand] = []
    for n in range(96):
        plan.append(send_request(SENDS, n, body_for("wait", n), o := next(opaques)))
        kinds[o] = ("wait", n)
    for n in range(48):
        plan.append(send_request(SENDS, n, body_for("nowait", n), o := next(opaques), wait=False))
        kinds[o] = ("nowait", n)
    for q in range(QUEUES):
        plan.append(pull_request(q, 1, o := next(opaques), hold=True))
        kinds[o] = ("held_pull", q)
    for i in range(24):
        plan.append(pull_request(i % QUEUES, 0, o := next(opaques), hold=False))
        kinds[o] = ("pull", i % QUEUES)
        plan.append(offset_query(i % QUEUES, o := next(opaques)))
        kinds[o] = ("offset", i % QUEUES)
    rng.shuffle(plan)
    at_once = {o for o, (k, _) in kinds.items() if k in ("nowait", "pull", "offset")}
    waiting = {o for o, (k, _) in kinds.items() if k == "wait"}
    held_pulls = {q: o for o, (k, q) in kinds.items() if k == "held_pull"}

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
                pipe = await Pipe.open(port, on_answer=lambda _resp: slave.reported)
                p = pipe
                # Both topics exist; each pull queue holds one message and a committed offset of its own.
                setup = [send_request(PULLS, q, body_for("seed", q), 900_000 + q, wait=False) for q in range(QUEUES)]
                setup.append(send_request(SENDS, 0, body_for("topic", 0), 900_100, wait=False))
                p.write(setup)
                await until(lambda: len(p.answers) == len(setup), 10, "the setup sends (WAIT=false)")
                for q in range(QUEUES):
                    h.app.broker.offsets.commit(GROUP, PULLS, q, committed(q))
                assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)
                base_records = len(slave.records())

                p.write(plan)  # everything in flight at once, on one connection
                answered = lambda: set(p.answers)  # noqa: E731
                await until(lambda: at_once <= answered(), 10, lambda: f"{len(at_once - answered())} at-once left")
                await until(lambda: len(slave.records()) == base_records + 96 + 48, 10, "the sends at the slave")
                must_wait = waiting | set(held_pulls.values())
                early = lambda: [kinds[o] for o in answered() & must_wait]  # noqa: E731
                await stays(lambda: not early(), 0.2, lambda: f"answered too early: {early()}")

                # Release the held pulls one by one, by sends on this same connection.
                order = list(range(QUEUES))
                rng.shuffle(order)
                for q in order:
                    late = 800_000 + q
                    p.write([send_request(PULLS, q, body_for("late", q), late, wait=False)])
                    await until(lambda q=q, late=late: {held_pulls[q], late} <= answered(), 10, f"held pull {q}")
                    released = {o for o in answered() if o in held_pulls.values()}
                    assert released == {held_pulls[x] for x in order[: order.index(q) + 1]}
                assert not answered() & waiting, "a SYNC_MASTER send answered with nothing acknowledged"

                # The slave acknowledges in three cuts: exactly the covered sends are answered.
                records = slave.records()
                by_body = {body_for("wait", n): o for o, (k, n) in kinds.items() if k == "wait"}
                mine = [(r.physical_offset + r.store_size, by_body[r.body]) for r in records if r.body in by_body]
                assert len(mine) == 96
                cuts = [mine[20][0], mine[61][0] - 1, records[-1].physical_offset + records[-1].store_size]
                for cut in cuts:
                    slave.report(cut)
                    expected = {o for end, o in mine if end <= cut}
                    await until(lambda e=expected: e <= answered(), 10, "the covered sends' answers")
                    assert answered() & waiting == expected
                    await stays(lambda e=expected: answered() & waiting == e, 0.05, "a send answered before its ack")
                assert answered() == set(p.sent)
                assert not slave.problems, slave.problems
            finally:
                if pipe is not None:
                    await pipe.close()
                await slave.close()

            assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)
            pipe.check_clean()
            arrival = sorted(pipe.answers, key=lambda o: pipe.answers[o].seq)
            assert arrival != [cmd.opaque for cmd in plan]  # the point: answers left out of order
            for opaque, answer in pipe.answers.items():
                request, resp = pipe.sent[opaque], answer.response
                kind, which = kinds.get(opaque, ("setup", -1))
                if request.code == RequestCode.SEND_MESSAGE_V2:
                    end = stored_end(store, port, request, resp)
                    if kind == "wait":
                        assert answer.seen >= end, f"{kind} {which}: answered at ack {answer.seen} < its end {end}"
                elif kind == "offset":
                    assert resp.code == ResponseCode.SUCCESS, resp
                    assert int(resp.ext_fields["offset"]) == committed(which), (which, resp.ext_fields)
                else:
                    assert kind in ("pull", "held_pull"), kind
                    assert resp.code == ResponseCode.SUCCESS, (kind, which, resp)
                    recs = decode_records(resp.body)
                    # answered before the late messages (plain) / by its queue's late message (held)
                    offset = 0 if kind == "pull" else 1
                    body = body_for("seed" if kind == "pull" else "late", which)
                    assert [(r.topic, r.queue_id, r.queue_offset, r.body) for r in recs] == [
                        (PULLS, which, offset, body)
                    ], (kind, which)
                    assert int(resp.ext_fields["nextBeginOffset"]) == offset + 1

    asyncio.run(main())
