"""Delayed delivery (RocketMQ ``ScheduleMessageService``): SCHEDULE_TOPIC_XXXX back to its topic.

The store files a message with DELAY=n under SCHEDULE_TOPIC_XXXX queue n-1, with its
due time as the consume-queue tag code and its real topic and queue in REAL_TOPIC /
REAL_QID. This service walks each level's queue in order and, once a message is due,
writes it again to its real topic and queue (DELAY cleared), then advances the level's
offset. Offsets persist in config/delayOffset.json ({"offsetTable":{level:offset}}), the
shape slaves fetch with GET_ALL_DELAY_OFFSET. Only a master delivers.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ledgermq.broker.json_file import load_json, save_json
from ledgermq.clock import Clock
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.consumequeue import UNIT
from ledgermq.store.dispatch import SCHEDULE_TOPIC
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ScheduleService:
    def __init__(self, store: MessageStore, path: Path, clock: Clock, poll_interval_s: float = 0.1) -> None:
        self.store = store
        self.path = path
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.levels = len(store.delay_levels_ms)
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self._task: asyncio.Task[None] | None = None
        self._dirty = False

    def load(self) -> None:
        doc = load_json(self.path) or {}
        self.offsets = {int(k): int(v) for k, v in (doc.get("offsetTable") or {}).items()}

    def persist(self) -> None:
        save_json(self.path, self.to_json())
        self._dirty = False

    def to_json(self) -> dict[str, object]:
        return {"offsetTable": dict(sorted(self.offsets.items()))}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._dirty:
            self.persist()

    async def _run(self) -> None:
        last_persist = self.clock.monotonic()
        while True:
            try:
                self.deliver_due()
                if self._dirty and self.clock.monotonic() - last_persist > 10:
                    self.persist()
                    last_persist = self.clock.monotonic()
            except Exception:
                log.exception("delayed delivery failed; retrying")
            await asyncio.sleep(self.poll_interval_s)

    def deliver_due(self, max_per_level: int = 1000) -> int:
        """Deliver every due message of every level; return how many went out."""
        count = 0
        for level in range(1, self.levels + 1):
            count += self._deliver_level(level, max_per_level)
        self.delivered += count
        return count

    def _deliver_level(self, level: int, budget: int) -> int:
        queue_id = level - 1
        cq = self.store.queues.get(SCHEDULE_TOPIC, queue_id)
        if cq is None:
            return 0
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        now = self.clock.wall_ms()
        count = 0
        while offset < cq.max_offset and count < budget:
            raw = cq.read_units(offset, 1)
            if not raw:
                break
            phy, size, due = UNIT.unpack(raw)
            if due > now:
                break
            record = self.store.commitlog.read(phy, size)
            if record is not None and not self._redeliver(record):
                break  # the store refused it (full, shutting down): try again later
            offset += 1
            count += 1
        if offset != self.offsets.get(level, 0):
            self.offsets[level] = offset
            self._dirty = True
        return count

    def _redeliver(self, record: bytes) -> bool:
        rec = decode_record(record, check_crc=False)
        props = dict(rec.properties)
        real_topic = props.get(P.REAL_TOPIC)
        real_qid = props.get(P.REAL_QID, "0")
        if not real_topic:
            log.error("scheduled message at %d has no REAL_TOPIC; dropped", rec.physical_offset)
            return True
        props.pop(P.DELAY, None)
        msg = MessageInput(
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
        result = self.store.put_message(msg)
        if not result.ok:
            log.warning("delayed delivery to %s refused: %s %s", real_topic, result.status.value, result.remark)
        return result.ok
