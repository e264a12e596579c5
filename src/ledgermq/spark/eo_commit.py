"""The driver side of ``exactlyOnce=true``: commit or roll back the halves the tasks stored.

Spark calls the writer's ``commit`` once per batch in a short-lived Python worker on the
driver; that call is the only place a half of this sink becomes visible. The protocol, per
(write id, batch id):

1. Look for the batch's commit records on the commit topic (``commit_records``). ``done``:
   the batch was committed before (a driver died after committing it and before Spark
   recorded the batch in its checkpoint): roll back this run's halves, nothing else. A
   complete ``started`` record without ``done``: a driver died while committing; finish
   *its* halves (below), write ``done``, roll back this run's.
2. Otherwise write a ``started`` record (the halves, and the current end of every queue
   their messages go to), then END_TRANSACTION COMMIT every half, awaiting each answer,
   then write ``done``.

Finishing a record commits only the halves whose message is not in its queue yet: it reads
each target queue from the offset the record noted and compares UNIQ_KEYs (a committed
message keeps its half's). END is not idempotent (a second COMMIT writes the message
twice), so an END without an answer is followed by that look before it is sent again.

Batch writes (``df.write``) run the same commit with a fresh write id per write: they
need no look-up, and a driver that dies in the middle of one leaves it partly visible
(docs/spark.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import uuid
from collections.abc import Iterable, Sequence

from ledgermq.client import LocalTransactionState, MessageExt, TransactionProducer
from ledgermq.client import records as R
from ledgermq.client.errors import MQClientError
from ledgermq.client.instance.pull_api import PullStatus
from ledgermq.failpoints import failpoint
from ledgermq.spark.broker import BrokerSession
from ledgermq.spark.commit_records import (
    Found,
    StartedRecord,
    collect,
    done_message,
    record_batch,
    started_messages,
)
from ledgermq.spark.half_sender import SentHalves, transaction_producer
from ledgermq.spark.half_set import HalfSet
from ledgermq.spark.offsets import QueueId
from ledgermq.spark.options import OptionError, WriteOptions

log = logging.getLogger(__name__)

IN_FLIGHT_ENDS = 64
FINISH_ATTEMPTS = 3
SCAN_CHUNK = 256  # commit records read per pull when looking back through the commit topic
READER_GROUP = "ledgermq-spark-eo-reader"
# Crash points of a fresh commit, for the fault tests (tests/spark/fault_points.py holds the
# driver at one and kills it): after the ``started`` record, after each answered END (the
# other ENDs in flight still land: a commit cut in the middle), before the ``done`` record.
AFTER_STARTED = "spark.eo.after_started"
AFTER_END = "spark.eo.after_end"
BEFORE_DONE = "spark.eo.before_done"


class CommitError(MQClientError):
    """A batch could not be committed; its ``started`` record (if written) lets the next run finish it."""


def stream_write_id(opts: WriteOptions) -> str:
    """A streaming query's write id: stable across restarts from the same checkpoint."""
    if opts.checkpoint_location is None:
        raise OptionError(
            "exactlyOnce=true in a streaming query needs the option 'checkpointLocation' on writeStream "
            "(the sink keys its commit records by it, so a restarted query finds them)"
        )
    location = opts.checkpoint_location.rstrip("/")
    return "q" + hashlib.sha256(location.encode()).hexdigest()[:24]


def batch_write_id() -> str:
    """A batch write's id: new for every ``df.write``."""
    return "w" + uuid.uuid4().hex[:24]


def halves_of(messages: Iterable[object]) -> HalfSet:
    return HalfSet.concat(m.halves for m in messages if isinstance(m, SentHalves))


class Coordinator:
    """One commit or abort call: a transaction producer of the group and a reader, on one loop."""

    def __init__(self, opts: WriteOptions, write_id: str, batch_id: int) -> None:
        self.opts = opts
        self.write_id = write_id
        self.batch_id = batch_id
        self.session = BrokerSession(opts.namesrv, api_timeout_ms=opts.api_timeout_ms, tls=opts.tls)
        self.producer: TransactionProducer | None = None
        self._parent = os.getppid()

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.producer is not None:
                self.session.run(self.producer.shutdown())
        except Exception as err:  # closing must not hide the error that got us here
            log.debug("exactly-once coordinator shutdown: %s", err)
        finally:
            self.session.close()

    async def _producer(self) -> TransactionProducer:
        if self.producer is None:
            producer = transaction_producer(self.opts, instance_name=f"spark-eo-{os.getpid()}")
            await producer.start()
            self.producer = producer
        return self.producer

    # -- reading the commit topic and the targets ------------------------------------------
    async def _read_range(self, q: QueueId, group: str, start: int, end: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        offset = start
        while offset < end:
            pulled = await self.session.pull(q, group, offset, min(SCAN_CHUNK, end - offset))
            if pulled.status is PullStatus.OFFSET_ILLEGAL:
                if pulled.min_offset > offset:  # retention removed the front: read on from what is left
                    offset = pulled.min_offset
                    continue
                raise CommitError(f"reading {q} at {offset}: the broker answers OFFSET_ILLEGAL")
            if pulled.status is PullStatus.FOUND:
                out.extend(r for r in R.decode_records(pulled.raw, check_crc=False, inflate=True))
            if pulled.next_offset <= offset:
                break
            offset = pulled.next_offset
        return [r for r in out if r.queue_offset < end]

    async def lookup(self) -> Found:
        """The batch's commit records: each queue of the commit topic read backwards until a
        record of an earlier batch of this write (commits run in batch order) or the front."""
        records: list[MessageExt] = []
        for q in await self.session.queues(self.opts.commit_topic):
            low, high = await self.session.min_offset(q), await self.session.max_offset(q)
            end = high
            while end > low:
                start = max(low, end - SCAN_CHUNK)
                chunk = await self._read_range(q, READER_GROUP, start, end)
                records.extend(chunk)
                batches = [record_batch(r, self.write_id) for r in chunk]
                if any(b is not None and b < self.batch_id for b in batches):
                    break
                end = start
        return collect(records, self.write_id, self.batch_id)

    async def start_offsets(self, halves: HalfSet) -> dict[tuple[str, str, int], int]:
        targets = list(halves.targets)
        ends = await asyncio.gather(*(self.session.max_offset(QueueId(t, b, q)) for b, t, q in targets))
        return dict(zip(targets, ends, strict=True))

    async def visible(self, record: StartedRecord, wanted: set[str]) -> set[str]:
        """Which of the ``wanted`` transaction ids are committed messages in their target queues."""
        found: set[str] = set()
        for (broker, topic, qid), start in sorted(record.start_offsets.items()):
            q = QueueId(topic, broker, qid)
            end = await self.session.max_offset(q)
            for rec in await self._read_range(q, READER_GROUP, start, end):
                uniq = rec.properties.get(R.UNIQ_KEY)
                if uniq in wanted:
                    found.add(uniq)
        return found

    # -- writing ---------------------------------------------------------------------------
    async def _send_record_messages(self, messages: Sequence[object]) -> None:
        producer = await self._producer()
        from ledgermq.client import Message, SendStatus

        for msg in messages:
            assert isinstance(msg, Message)
            sent = await producer.send(msg)
            if sent.status is not SendStatus.SEND_OK:
                raise CommitError(f"commit record {sent.msg_id} stored as {sent.status.value}, not SEND_OK")

    async def _end_many(self, halves: HalfSet, indices: Iterable[int], state: LocalTransactionState) -> list[int]:
        """END ``state`` for the halves at ``indices``, ``IN_FLIGHT_ENDS`` at a time (a fixed set
        of workers, so a million halves cost no million coroutines); the indices that got no
        SUCCESS."""
        producer = await self._producer()
        failed: list[int] = []
        todo = iter(indices)

        async def worker() -> None:
            for i in todo:
                if os.getppid() != self._parent:  # the Spark driver that called us is gone: stop committing
                    failed.append(i)
                    continue
                try:
                    await producer.end_transaction(halves.half(i), state)
                except MQClientError as exc:
                    log.warning("END %s of half %s failed: %s", state.value, halves.msg_ids[i], exc)
                    failed.append(i)
                    continue
                if state is LocalTransactionState.COMMIT_MESSAGE:
                    failpoint(AFTER_END)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT_ENDS)))
        return sorted(failed)

    async def finish(self, record: StartedRecord, *, fresh: bool) -> None:
        """COMMIT every half of ``record`` whose message is not visible yet."""
        halves = record.halves
        pending = list(range(len(halves)))
        if not fresh:
            seen = await self.visible(record, set(halves.msg_ids))
            pending = [i for i in pending if halves.msg_ids[i] not in seen]
            log.warning(
                "ledgermq sink: finishing batch %d of %s left half-committed by an earlier driver: %d of %d halves "
                "still to commit",
                self.batch_id,
                self.write_id,
                len(pending),
                len(halves),
            )
        for attempt in range(FINISH_ATTEMPTS):
            failed = await self._end_many(halves, pending, LocalTransactionState.COMMIT_MESSAGE)
            if not failed:
                return
            if os.getppid() != self._parent:
                raise CommitError(f"the Spark driver went away while batch {self.batch_id} was committed")
            # an END without an answer may still have been applied: look before sending it again
            await asyncio.sleep(self.opts.api_timeout_ms / 1000)
            seen = await self.visible(record, {halves.msg_ids[i] for i in failed})
            pending = [i for i in failed if halves.msg_ids[i] not in seen]
            if not pending:
                return
            log.warning("ledgermq sink: %d ENDs of batch %d to send again (round %d)", len(pending), self.batch_id,
                        attempt + 1)  # fmt: skip
        raise CommitError(
            f"batch {self.batch_id}: {len(pending)} of {len(halves)} halves could not be committed; "
            "the next run of the query finishes them from the commit record"
        )

    async def rollback(self, halves: HalfSet) -> None:
        """Best effort: a half nobody commits is rolled back by the broker's check anyway."""
        failed = await self._end_many(halves, range(len(halves)), LocalTransactionState.ROLLBACK_MESSAGE)
        if failed:
            log.warning("ledgermq sink: %d of %d halves not rolled back now (the broker's check will)", len(failed),
                        len(halves))  # fmt: skip

    async def commit(self, halves: HalfSet, *, fresh: bool) -> tuple[str, bool]:
        """The protocol of the module notes; what it did, for the log, and whether the batch
        had been committed (or begun) by an earlier run."""
        found = Found() if fresh else await self.lookup()
        for token, (got, count) in found.incomplete.items():
            log.warning("ledgermq sink: batch %d has an incomplete commit record %s (%d of %d parts): ignored",
                        self.batch_id, token, got, count)  # fmt: skip
        if found.done:
            await self.rollback(halves)
            return f"already committed by an earlier run; {len(halves)} repeated rows rolled back", True
        if found.started is not None:
            await self.finish(found.started, fresh=False)
            await self._send_record_messages([done_message(self.opts.commit_topic, self.write_id, self.batch_id)])
            await self.rollback(halves)
            return f"finished the earlier run's commit; {len(halves)} repeated rows rolled back", True
        if not halves:
            return "nothing to commit", False
        record = StartedRecord(uuid.uuid4().hex, halves, await self.start_offsets(halves))
        await self._send_record_messages(started_messages(self.opts.commit_topic, self.write_id, self.batch_id, record))
        failpoint(AFTER_STARTED)
        await self.finish(record, fresh=True)
        failpoint(BEFORE_DONE)
        await self._send_record_messages([done_message(self.opts.commit_topic, self.write_id, self.batch_id)])
        return f"{len(halves)} rows committed", False

    async def abort(self, halves: HalfSet, *, fresh: bool) -> None:
        """Roll back ``halves``, but not those a ``started`` record holds (a commit that failed
        after writing it: the next run finishes them)."""
        if not fresh:
            found = await self.lookup()
            if found.started is not None:
                keep = set(found.started.halves.msg_ids)
                halves = halves.select(i for i in range(len(halves)) if halves.msg_ids[i] not in keep)
        await self.rollback(halves)


def commit_write(opts: WriteOptions, write_id: str, batch_id: int, messages: Iterable[object], *, fresh: bool) -> None:
    halves = halves_of(messages)
    with Coordinator(opts, write_id, batch_id) as c:
        what, rerun = c.session.run(c.commit(halves, fresh=fresh))
    # a re-run batch is worth a line in the driver's log; the ordinary commit is not
    log.log(logging.WARNING if rerun else logging.INFO, "ledgermq sink (exactly once): batch %d of %s: %s",
            batch_id, write_id, what)  # fmt: skip


def abort_write(opts: WriteOptions, write_id: str, batch_id: int, messages: Iterable[object], *, fresh: bool) -> None:
    halves = halves_of(messages)
    with Coordinator(opts, write_id, batch_id) as c:
        c.session.run(c.abort(halves, fresh=fresh))
    log.warning("ledgermq sink (exactly once): batch %d of %s aborted, %d rows rolled back", batch_id, write_id,
                len(halves))  # fmt: skip
