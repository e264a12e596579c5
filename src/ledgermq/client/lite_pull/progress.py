"""How far the application has consumed each queue of a lite pull consumer: ``poll``
advances it, ``seek`` moves it anywhere, commits record it. (The readers, which fill the
buffer ``poll`` takes from, are ``lite_pull.readers``.)

``poll`` hands out up to ``consume_message_batch_max_size`` buffered messages, oldest
batch first, or waits up to its timeout for some, and moves each queue's *consume offset*
(the offset after the last message returned, what a commit records). ``commit_sync`` puts
the consume offsets into the offset store's memory; the client instance persists that to
the brokers every ``persist_interval`` (5 s) and at shutdown. ``commit(...)`` also writes
at once and waits for the brokers' answers. With ``auto_commit`` each ``poll`` first
commits (as ``commit_sync``) when ``auto_commit_interval`` has passed since the last time.
Offsets of a broadcasting consumer live in a local file instead.

``seek`` repositions a queue (validated against the queue's min and max offsets) and
discards what was buffered for it, since that was read from the old position.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from ledgermq.client.consumer.common import MessageModel
from ledgermq.client.consumer.offset_store import OFFSET_UNREADABLE, ReadOffsetType, RemoteOffsetStore
from ledgermq.client.consumer.rebalance import RebalanceImpl
from ledgermq.client.errors import MQClientError
from ledgermq.client.lite_pull.assigned_queues import ConsumeBuffer, QueueState
from ledgermq.client.lite_pull.plan import ReadPlan
from ledgermq.client.lite_pull.readers import QueueReaders
from ledgermq.client.lite_pull.state import LitePullState
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord

__all__ = ["ConsumeProgress"]

# the consumer's logger: failed commits are the consumer's to report
log = logging.getLogger("ledgermq.client.lite_pull.consumer")


class ConsumeProgress:
    """Polls, seeks and commits of one consumer. The consumer checks that it is running
    before it asks; this works on its buffer, offset store and assigned queues' states."""

    def __init__(self, state: LitePullState, plan: ReadPlan, buffer: ConsumeBuffer, readers: QueueReaders) -> None:
        self._state = state
        self._plan = plan
        self._assigned = plan.assigned
        self._buffer = buffer
        self._readers = readers
        self._next_auto_commit = float("-inf")

    async def poll(self, timeout: float | None) -> list[MessageRecord]:
        shared = self._state
        if timeout is None:
            timeout = shared.settings.poll_timeout_millis / 1000
        if timeout < 0:
            raise ValueError("the poll timeout must not be negative")
        if shared.settings.auto_commit:
            self._maybe_auto_commit()
        now = shared.clock.monotonic
        deadline = now() + timeout
        while True:
            out = self._buffer.take(shared.settings.consume_message_batch_max_size)
            if out or not shared.running:
                return out
            remaining = deadline - now()
            if remaining <= 0:
                return []
            try:
                async with asyncio.timeout(remaining):  # no task per wait, unlike wait_for
                    await self._buffer.ready.wait()
            except TimeoutError:
                pass

    # -- positions -----------------------------------------------------------------------
    async def seek(self, mq: MessageQueue, offset: int) -> None:
        self._plan.state_of(mq)
        pull_api = self._state.started.instance.pull_api
        low, high = await asyncio.gather(pull_api.min_offset(mq), pull_api.max_offset(mq))
        if not low <= offset <= high:
            raise MQClientError(
                f"seek offset {offset} of {mq} is illegal: outside [min offset {low}, max offset {high}]"
            )
        self._seek_now(self._plan.state_of(mq), offset)  # the queue may have left while we asked

    def _seek_now(self, state: QueueState, offset: int) -> None:
        self._readers.drop(state)
        state.pull_offset = offset
        state.consume_offset = offset
        state.idle = False
        if self._state.running:
            self._readers.start([state])

    # -- commits -------------------------------------------------------------------------
    async def committed(self, mq: MessageQueue) -> int:
        offset = await self._state.started.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if offset == OFFSET_UNREADABLE:
            raise MQClientError(f"the committed offset of {mq} could not be fetched from the broker")
        return offset

    def commit_sync(self) -> None:
        store = self._state.started.offset_store
        for state in self._assigned.states():
            if state.consume_offset >= 0 and not state.pq.dropped:
                store.update_offset(state.mq, state.consume_offset, increase_only=False)

    def _maybe_auto_commit(self) -> None:
        """Commit when ``auto_commit_interval`` has passed since the last auto-commit: by
        then the application has processed what the previous polls returned."""
        now = self._state.clock.monotonic()
        if now >= self._next_auto_commit:
            self.commit_sync()
            self._next_auto_commit = now + self._state.settings.auto_commit_interval

    async def commit(self, offsets: Mapping[MessageQueue, int] | None, persist: bool) -> None:
        shared = self._state
        store = shared.started.offset_store
        if offsets is None:
            offsets = {
                s.mq: s.consume_offset for s in self._assigned.states() if s.consume_offset >= 0 and not s.pq.dropped
            }
        mine: dict[MessageQueue, int] = {}
        direct: dict[MessageQueue, int] = {}
        for mq, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"the offset of {mq} is negative ({offset})")
            state = self._assigned.get(mq)
            if state is not None and not state.pq.dropped:
                store.update_offset(mq, offset, increase_only=False)
                mine[mq] = offset
            elif not self._plan.subscribing and persist:
                direct[mq] = offset
            else:
                log.info(  # rebalanced away between the poll and the commit
                    "group %s: offset %d of %s not committed: the queue is not assigned here",
                    shared.group,
                    offset,
                    mq,
                )
        if not persist:
            return
        if shared.settings.message_model is MessageModel.BROADCASTING:
            for mq, offset in direct.items():
                store.update_offset(mq, offset, increase_only=False)
            await store.persist_all(self._assigned.queues() | set(mine) | set(direct))
            return
        errors: list[Exception] = []
        for mq, offset in {**mine, **direct}.items():
            try:
                await store.update_consume_offset_to_broker(mq, offset, False)
            except MQClientError as exc:
                errors.append(exc)
                log.info("group %s: committing offset %d of %s failed: %s", shared.group, offset, mq, exc)  # raised
        if errors:
            raise errors[0]

    # -- persisting ----------------------------------------------------------------------
    async def persist(self, rebalance: RebalanceImpl | None) -> None:
        """Persist the stored offsets of the queues read now. In subscribe mode those are the
        rebalance's, which may hold queues the readers have not taken up yet."""
        queues = self._assigned.queues()
        if self._plan.subscribing and rebalance is not None:
            queues = set(rebalance.process_queue_table)
        await self._state.started.offset_store.persist_all(queues)

    async def flush(self) -> None:
        """At shutdown: write every assigned queue's stored offset and wait for the answers
        (the periodic persist sends them oneway); all queues at once, so an unresponsive
        broker costs one request timeout, not one per queue."""
        shared = self._state
        store = shared.started.offset_store
        queues = self._assigned.queues()
        if shared.settings.message_model is MessageModel.BROADCASTING or not isinstance(store, RemoteOffsetStore):
            await self.persist(shared.started.rebalance)
            return

        async def one(mq: MessageQueue, offset: int) -> None:
            try:
                await store.update_consume_offset_to_broker(mq, offset, False)
            except MQClientError as exc:
                log.warning(  # once, at shutdown: the next owner re-reads from the last commit
                    "group %s: committing offset %d of %s at shutdown failed: %s", shared.group, offset, mq, exc
                )

        table = store.clone_offset_table()
        await asyncio.gather(*(one(mq, offset) for mq, offset in table.items() if mq in queues))

    async def forget(self, mq: MessageQueue) -> None:
        """A queue left the assignment: persist what was committed for it, then forget it
        (unless it was assigned again meanwhile)."""
        store = self._state.started.offset_store
        await store.persist(mq)
        if mq not in self._assigned:
            store.remove_offset(mq)
