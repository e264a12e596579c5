"""Guarantee 1: a SYNC_MASTER send is answered SEND_OK only once a slave acknowledged the
bytes of *that* message (not an earlier message's), also with 256 sends in flight on one
connection or spread over four.

The master is a real broker (in this process, real sockets); the slave is ``FakeSlave``, a
4.x-protocol slave the test drives, which receives everything the master streams but
acknowledges only the offsets the test picks. With 256 sends pipelined and every byte
received by the slave, nothing is acknowledged and nothing may be answered. Then the slave
acknowledges a seeded sequence of offsets: exactly at a record's end, one byte short of a
record's end, or somewhere inside a record; after each, exactly the sends whose records end at or below the
acknowledged offset must have been answered, and the others must keep waiting. When an
answer is read, the acknowledged offset must already cover the record it names, and that
record (read back by msgId and through the consume queue, and compared with the bytes the
slave holds) must carry the body sent under the answer's opaque.

What a broken send path does here: answering before any ack fails at once; waking every
waiter on the next ack (or on an ack for an earlier message) fails at the first cut;
comparing the ack with where a record starts instead of where it ends, or an off-by-one,
fails at a cut inside a record; a mixed-up answer fails the read-back.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.protocol.codes import ResponseCode
from tests.broker.harness import running_broker
from tests.guarantees.fake_slave import FakeSlave
from tests.guarantees.sends import body_for, send_request, stored_end
from tests.guarantees.wire import Pipe, stays, until

TOPIC = "GuardSyncMaster"
N = 256
CUTS = 10


@pytest.mark.parametrize("senders", [1, 4])
def test_sync_master_answers_each_send_once_the_slave_acknowledged_its_own_bytes(tmp_path: Path, senders: int) -> None:
    rng = random.Random(1200 + senders)

    async def main() -> None:
        store_cfg = {"broker_role": BrokerRole.SYNC_MASTER, "sync_flush_timeout_ms": 30_000}
        async with running_broker(tmp_path, store=store_cfg) as h:
            store, port, ha = h.app.broker.store, h.app.port, h.app.broker.ha
            assert ha is not None
            slave = FakeSlave()
            pipes: list[Pipe] = []
            try:
                await slave.connect(h.app.config.ha_port)
                await until(lambda: ha.connection_count == 1, 10, "the slave to connect")
                counter = [0]
                acked_at_answer = lambda _resp: slave.reported  # noqa: E731

                # One send first (it creates the topic): no answer until its bytes are acknowledged.
                warm = await Pipe.open(port, counter, acked_at_answer)
                pipes.append(warm)
                warm.write([send_request(TOPIC, 0, body_for("warm", 0), 1)])
                await until(lambda: len(slave.records()) == 1, 10, "the first record at the slave")
                await stays(lambda: not warm.answers, 0.1, "answered before any acknowledgement")
                slave.report(slave.received)
                await until(lambda: 1 in warm.answers, 10, "the first answer")
                assert warm.answers[1].response.code == ResponseCode.SUCCESS, warm.answers[1].response

                # 256 in flight; the slave has all their bytes but acknowledges none.
                senders_pipes = [await Pipe.open(port, counter, acked_at_answer) for _ in range(senders)]
                pipes += senders_pipes
                opaques = rng.sample(range(10, 2**31 - 1), N)
                opaque_of = {body_for("sm", n): opaques[n] for n in range(N)}
                for i, pipe in enumerate(senders_pipes):
                    pipe.write(send_request(TOPIC, n, body_for("sm", n), opaques[n]) for n in range(i, N, senders))
                await until(lambda: len(slave.records()) == 1 + N, 10, lambda: f"{len(slave.records())} records")
                answered = lambda: {o for p in senders_pipes for o in p.answers}  # noqa: E731
                await stays(lambda: not answered(), 0.2, lambda: f"{len(answered())} answered with no ack")

                records = slave.records()[1:]
                ends = [r.physical_offset + r.store_size for r in records]
                picks = sorted(rng.sample(range(N - 1), CUTS))
                cuts = []
                for k, i in enumerate(picks):  # at a record's end, one byte short of the next's, inside it
                    cuts.append(
                        (ends[i], ends[i + 1] - 1, ends[i] + rng.randrange(1, records[i + 1].store_size))[k % 3]
                    )
                cuts.append(ends[-1])
                for cut in cuts:
                    slave.report(cut)
                    expected = {opaque_of[r.body] for r, end in zip(records, ends, strict=True) if end <= cut}
                    await until(
                        lambda e=expected: e <= answered(), 10, lambda e=expected: f"{len(e - answered())} unanswered"
                    )
                    extra = answered() - expected
                    assert not extra, f"{len(extra)} sends answered before the slave acknowledged their bytes"
                    await stays(lambda e=expected: answered() == e, 0.05, lambda: "answered before its ack")
                assert len(answered()) == N
                assert not slave.problems, slave.problems
            finally:
                for p in pipes:
                    await p.close()
                await slave.close()

            assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)
            held = bytes(slave.data)
            for pipe in pipes:
                pipe.check_clean()
                assert set(pipe.answers) == set(pipe.sent)
                for opaque, answer in pipe.answers.items():
                    resp = answer.response
                    assert resp.code == ResponseCode.SUCCESS, resp  # never FLUSH_SLAVE_TIMEOUT here
                    end = stored_end(store, port, pipe.sent[opaque], resp)
                    assert answer.seen >= end, f"opaque {opaque}: answered at ack {answer.seen} < its end {end}"
            # What the slave acknowledged is the master's log, byte for byte.
            assert held == store.read_commitlog(0, len(held))

    asyncio.run(main())
