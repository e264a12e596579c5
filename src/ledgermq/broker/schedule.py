"""Delayed delivery (RocketMQ ``ScheduleMessageService``): SCHEDULE_TOPIC_XXXX back to its topic.

The store files a message with DELAY=n under SCHEDULE_TOPIC_XXXX queue n-1, with its
due time as the consume-queue tag code and its real topic and queue in REAL_TOPIC /
REAL_QID. This service walks each level's queue in order and, once a message is due,
writes it again to its real topic and queue (DELAY cleared), then advances the level's
offset. Offsets persist in config/delayOffset.json ({"offsetTable":{level:offset}}), the
shape slaves fetch with GET_ALL_DELAY_OFFSET. Only a master delivers.

The running service writes through ``put`` (the broker's writer, ``Broker.put``): the
store natively, the Raft group in DLedger mode, where the service runs only while this
broker leads (``BrokerApp`` starts and stops it with leadership). A level's offset moves
past a message only once ``put`` answered PUT_OK; a refusal or an unknown outcome (the
leader lost its leadership before the commit) leaves it, and the message is delivered
again later, possibly twice: at-least-once, as RocketMQ.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.json_file import load_json, save_json
from ledgermq.clock import Clock
from ledgermq.errors import StoreError
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.consumequeue import UNIT
from ledgermq.store.dispatch import SCHEDULE_TOPIC
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.results import PutResult

log = logging.getLogger(__name__)

Put = Callable[[MessageInput], Awaitable[PutResult]]


class ScheduleService:
    def __init__(
        self, store: MessageStore, path: Path, clock: Clock, poll_interval_s: float = 0.1, put: Put | None = None
    ) -> None:
        self.store = store
        self.put: Put = put or self._put_native
        self.path = path
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.levels = len(store.delay_levels_ms)
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        # a round at once, then every poll interval; persisted at most every 10 s while dirty
        self._periodic = Periodic("schedule-service", self._round, poll_interval_s, first_delay=0)
        self._last_persist = clock.monotonic()
        self._dirty = False

    def load(self) -> None:
        doc = load_json(self.path) or {}
        self.offsets = {int(k): int(v) for k, v in (doc.get("offsetTable") or {}).items()}

    def persist(self) -> None:
        save_json(self.path, self.to_json())
        self._dirty = False

    def to_json(self) -> dict[str, object]:
        return {"offsetTable": dict(sorted(self.offsets.items()))}

    def adopt(self, doc: object) -> None:
        """A follower takes its master's offsets (GET_ALL_DELAY_OFFSET body), so that it answers
        the same table and starts from it if it becomes the master. Ignored while running:
        a running service owns its offsets."""
        if self.running or not isinstance(doc, dict):
            return
        self.offsets = {int(k): int(v) for k, v in (doc.get("offsetTable") or {}).items()}
        self._dirty = False

    @property
    def running(self) -> bool:
        return self._periodic.running

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()
        if self._dirty:
            self.persist()

    async def _round(self) -> None:
        await self.deliver_due_async()
        if self._dirty and self.clock.monotonic() - self._last_persist > 10:
            self.persist()
            self._last_persist = self.clock.monotonic()

    def deliver_due(self, max_per_level: int = 1000) -> int:
        """Deliver every due message of every level straight into the store (native mode, as
        one synchronous step); return how many went out."""
        count = 0
        for level in range(1, self.levels + 1):
            count += self._deliver_level(level, max_per_level)
        self.delivered += count
        return count

    async def deliver_due_async(self, max_per_level: int = 1000) -> int:
        """``deliver_due`` through ``put`` (what the running service does, in either mode)."""
        count = 0
        for level in range(1, self.levels + 1):
            count += await self._deliver_level_async(level, max_per_level)
        self.delivered += count
        return count

    def _deliver_level(self, level: int, budget: int) -> int:
        count = 0
        for next_offset, msg in self._due(level, budget):
            if msg is not None and not self._accepted(msg, self._put_now(msg)):
                break  # the store refused it (full, shutting down): try again later
            self._advance(level, next_offset)
            count += 1
        return count

    async def _deliver_level_async(self, level: int, budget: int) -> int:
        count = 0
        for next_offset, msg in self._due(level, budget):
            if msg is not None and not self._accepted(msg, await self.put(msg)):
                break  # refused, or not known to be committed: the same message next round
            self._advance(level, next_offset)
            count += 1
        return count

    def _due(self, level: int, budget: int) -> Iterator[tuple[int, MessageInput | None]]:
        """The level's due messages in order, lazily, each with the offset that follows it;
        None for an entry that cannot be delivered (unreadable, no REAL_TOPIC): skipped."""
        cq = self.store.queues.get(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        now = self.clock.wall_ms()
        while offset < cq.max_offset and budget > 0:
            raw = cq.read_units(offset, 1)
            if not raw:
                return
            phy, size, due = UNIT.unpack(raw)
            if due > now:
                return
            record = self.store.commitlog.read(phy, size)
            offset += 1
            budget -= 1
            yield offset, self._real_message(record) if record is not None else None

    def _advance(self, level: int, offset: int) -> None:
        if offset != self.offsets.get(level, 0):
            self.offsets[level] = offset
            self._dirty = True

    @staticmethod
    def _accepted(msg: MessageInput, result: PutResult) -> bool:
        if not result.ok:
            log.warning("delayed delivery to %s refused: %s %s", msg.topic, result.status.value, result.remark)
        return result.ok

    async def _put_native(self, msg: MessageInput) -> PutResult:
        return self._put_now(msg)

    def _put_now(self, msg: MessageInput) -> PutResult:
        """A put straight into a native store (``deliver_due`` and a service built without a
        ``put``); a store in DLedger mode writes through its Raft group, so ``put`` must be given."""
        store = self.store
        if not isinstance(store, NativeMessageStore):
            raise StoreError("DLedger mode: delayed delivery writes through the broker's put (its Raft group)")
        return store.put_message(msg)

    def _real_message(self, record: bytes) -> MessageInput | None:
        """The scheduled record as a message for its real topic and queue, DELAY cleared."""
        rec = decode_record(record, check_crc=False)
        props = dict(rec.properties)
        real_topic = props.get(P.REAL_TOPIC)
        real_qid = props.get(P.REAL_QID, "0")
        if not real_topic:
            log.error("scheduled message at %d has no REAL_TOPIC; dropped", rec.physical_offset)
            return None
        props.pop(P.DELAY, None)
        return MessageInput(
            topic=real_topic,
            body=rec.body,
            queue_id=int(real_qid) if real_qid.isdigit() else 0,
            flag=rec.flag,
            properties=props,
            sysflag=rec.sysflag,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            store_host=rec.store_host,
            reconsume_times=rec.reconsume_times,
            wait_store_ok=False,
        )
