"""Guarantee 2: under SYNC_FLUSH a send is answered SEND_OK only after an fsync that covers
its own bytes, also under group commit with 256 sends in flight (one connection or four).

The group-commit thread's fsyncs are held by a failpoint (``mapped_file.before_fsync``,
reached after the flush has fixed which bytes it covers), one round at a time:

* round 1 covers a plug message only; while it is held, batch A (128 sends) is appended
  (every put on the event loop, so the flush thread, held, cannot start a round mid-batch);
* round 2 covers exactly A (its extent is fixed before the test sends anything more);
  while it is held, batch B (128 sends) is appended: 256 sends in flight, none answered;
* releasing round 2 must answer all of A and none of B (B's bytes are not covered: an
  implementation that answers whoever waited when *an* fsync completed fails here);
* releasing round 3 answers B.

At the moment each answer is read (same event loop as the broker) the store's flushed
offset must already cover the record the answer names, and that record must hold the body
sent under the answer's opaque (read back by msgId and through the consume queue).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from ledgermq.config import FlushDiskType
from ledgermq.failpoints import armed
from ledgermq.protocol.codes import ResponseCode
from ledgermq.store.flush import GroupCommitService
from tests.broker.harness import running_broker
from tests.guarantees.sends import body_for, send_request, stored_end
from tests.guarantees.wire import Pipe, stays, until

FSYNC = "mapped_file.before_fsync"
TOPIC = "GuardFlush"
BATCH = 128  # A and B together: 256 in flight


class FsyncGate:
    """Holds the group-commit thread's fsyncs: round k waits until ``release`` was called k times."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rounds = 0  # fsyncs reached (each is held until released)
        self.released = 0

    def action(self) -> None:
        if threading.current_thread().name != GroupCommitService.name:
            return
        with self.cond:
            self.rounds += 1
            mine = self.rounds
            self.cond.wait_for(lambda: self.released >= mine, timeout=30)

    def release(self, upto: int) -> None:
        with self.cond:
            self.released = upto
            self.cond.notify_all()


@pytest.mark.parametrize("senders", [1, 4])
def test_sync_flush_answers_only_after_an_fsync_covering_each_sends_own_bytes(tmp_path: Path, senders: int) -> None:
    gate = FsyncGate()

    async def main() -> None:
        store_cfg = {
            "flush_disk_type": FlushDiskType.SYNC_FLUSH,
            "sync_flush_timeout_ms": 30_000,  # held fsyncs must not turn into FLUSH_DISK_TIMEOUT
            "mapped_file_size_commitlog": 4 * 1024 * 1024,  # one segment: one fsync per round
        }
        async with running_broker(tmp_path, store=store_cfg) as h:
            store = h.app.broker.store
            port = h.app.port
            await h.send(TOPIC, body_for("warm", 0))  # the topic exists; the disk is fine
            counter = [0]
            flushed_at_answer = lambda _resp: store.flushed_phy_offset  # noqa: E731
            plug_pipe = await Pipe.open(port, counter, flushed_at_answer)
            pipes = [await Pipe.open(port, counter, flushed_at_answer) for _ in range(senders)]
            try:
                with armed(FSYNC, gate.action):
                    base = store.max_phy_offset
                    plug_pipe.write([send_request(TOPIC, 0, body_for("plug", 0), 1)])
                    await until(lambda: gate.rounds == 1, 10, "the plug's fsync")
                    size = store.max_phy_offset - base  # every record has the same size
                    assert size > 0

                    def batch(tag: str, first_opaque: int) -> list[int]:
                        opaques = []
                        for i, pipe in enumerate(pipes):
                            share = range(i, BATCH, senders)
                            pipe.write(send_request(TOPIC, n, body_for(tag, n), first_opaque + n) for n in share)
                            opaques += [first_opaque + n for n in share]
                        return opaques

                    async def appended(end: int) -> None:
                        await until(lambda: store.max_phy_offset == end, 10, lambda: f"{store.max_phy_offset} < {end}")

                    a = batch("A", 1000)
                    end_a = base + size * (1 + BATCH)
                    await appended(end_a)
                    assert gate.rounds == 1 and not any(p.answers for p in pipes) and not plug_pipe.answers

                    # The plug's fsync completes. The plug is answered now, or (if the flush thread's
                    # 10 ms tick fell between its append and its flush request) with A below.
                    gate.release(1)
                    await until(lambda: gate.rounds == 2, 10, "the fsync of A")
                    batch("B", 5000)
                    end_b = end_a + size * BATCH
                    await appended(end_b)
                    answered = lambda: sum(len(p.answers) for p in pipes)  # noqa: E731
                    await stays(lambda: answered() == 0, 0.2, lambda: f"{answered()} answered before their fsync")

                    gate.release(2)  # A's fsync completes: all of A answered, none of B
                    await until(lambda: gate.rounds == 3, 10, "the fsync of B")
                    a_answers = lambda: sum(o in p.answers for p in pipes for o in a)  # noqa: E731
                    await until(lambda: a_answers() == BATCH, 10, lambda: f"A's answers: {a_answers()}")
                    assert 1 in plug_pipe.answers
                    await stays(
                        lambda: answered() == BATCH, 0.2, lambda: f"{answered() - BATCH} of B answered by A's fsync"
                    )
                    assert store.flushed_phy_offset == end_a  # B's fsync is still held

                    gate.release(3)
                    await until(lambda: answered() == 2 * BATCH, 10, lambda: f"{answered()} of {2 * BATCH} answered")
                    gate.release(1_000_000)
            finally:
                gate.release(1_000_000)
                for p in [plug_pipe, *pipes]:
                    await p.close()

            assert await asyncio.to_thread(store.wait_dispatched, None, 10.0)
            for pipe in [plug_pipe, *pipes]:
                pipe.check_clean()
                for opaque, answer in pipe.answers.items():
                    resp = answer.response
                    assert resp.code == ResponseCode.SUCCESS, resp  # never FLUSH_DISK_TIMEOUT
                    end = stored_end(store, port, pipe.sent[opaque], resp)
                    assert answer.seen >= end, f"opaque {opaque} answered with flushed {answer.seen} < its end {end}"
            assert set(plug_pipe.answers) == {1}
            for p in pipes:
                assert set(p.answers) == set(p.sent)
            a_set = {o for p in pipes for o in p.answers if o < 5000}
            assert max(answer.seen for p in pipes for o, answer in p.answers.items() if o in a_set) <= end_a
            assert all(answer.seen >= end_a for p in pipes for o, answer in p.answers.items() if o not in a_set)

    asyncio.run(main())
