"""The master's transaction check service (RocketMQ 4.9 ``TransactionalMessageCheckService``
with its ``DefaultTransactionalMessageCheckListener``).

Every ``transactionCheckInterval`` ms (read afresh each round, so UPDATE_BROKER_CONFIG
applies at the next one) a round runs: ``scan`` decides over the half queue as it is when
the round starts (in a thread: it reads the store), then the actions are carried out in
order through ``Broker.put``:

* ``check``: the half message is re-put with TRANSACTION_CHECK_TIMES raised, and
  CHECK_TRANSACTION_STATE (39) goes *oneway* to a live producer connection of the
  message's PGROUP (the group's connections in turn, as RocketMQ rotates them), naming
  the new copy (its queue offset, commit-log offset and offset id; msgId and
  transactionId = UNIQ_KEY) with the copy as the body, topic and queue set back to the
  real ones. With no live producer of the group, nothing is sent this round
  (RocketMQ logs and moves on; the copy is checked again next round);
* ``immunity``: re-put only;
* ``discard``: logged (one line per message) and moved to TRANS_CHECK_MAX_TIME_TOPIC.

A failed re-put stops the round there. Then the progress offsets of the half and op
queues are saved (``store_queues``). Only a master runs the service: BrokerApp starts it
on a master at start-up and, in DLedger mode, when this broker becomes the Raft leader,
and stops it when it stops leading.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.clients import ClientChannel
from ledgermq.broker.context import Broker
from ledgermq.broker.transactions.half import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC, real_destination, renewed
from ledgermq.broker.transactions.scan import Action, ScanResult, ScanSettings, scan
from ledgermq.broker.transactions.store_queues import StoreQueues, progress, save_progress
from ledgermq.broker.transactions.writes import put
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import encode_record
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, TopicConfig
from ledgermq.store.results import AppendResult

log = logging.getLogger("ledgermq.broker.transactions")


@dataclass(slots=True)
class RoundReport:
    """What one round did (for logs and tests)."""

    checked: list[str] = field(default_factory=list)  # UNIQ_KEYs asked about
    unsent: list[str] = field(default_factory=list)  # checks with no live producer to ask
    discarded: list[str] = field(default_factory=list)
    immune: int = 0
    half_offset: int = 0
    op_offset: int = 0


class TransactionCheckService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.queues = StoreQueues(broker.store)
        self.rounds = 0
        self._turn = 0  # rotates checks over a group's producers (ProducerManager.getAvailableChannel)
        # every transactionCheckInterval, read anew each round (updateBrokerConfig may change it)
        self._periodic = Periodic(
            "transaction-check", self.check_round, lambda: self.broker.config.transaction_check_interval_ms / 1000
        )

    @property
    def running(self) -> bool:
        return self._periodic.running

    def start(self) -> None:
        if not self.running:
            interval = self.broker.config.transaction_check_interval_ms
            log.info("transaction check service started (every %d ms)", interval)
            self._periodic.start()

    async def stop(self) -> None:
        if self.running:
            await self._periodic.stop()
            log.info("transaction check service stopped")

    async def check_round(self) -> RoundReport:
        b = self.broker
        cfg = b.config
        start_ms = b.clock.wall_ms()
        settings = ScanSettings(
            timeout_ms=cfg.transaction_timeout_ms,
            check_max=cfg.transaction_check_max,
            reserved_ms=int(b.store_config.file_reserved_time_hours * 3600 * 1000),
        )
        half_start = progress(b.offsets, b.store, HALF_TOPIC)
        op_start = progress(b.offsets, b.store, OP_TOPIC)
        result = await asyncio.to_thread(scan, self.queues, half_start, op_start, b.clock.wall_ms(), start_ms, settings)
        for op in result.bad_ops:
            log.error("op message at %d of %s has tag %r, not 'd'; ignored", op.queue_offset, OP_TOPIC, op.tags)
        report = await self._carry_out(result, half_start, op_start)
        self.rounds += 1
        if report.checked or report.unsent or report.discarded or report.immune:
            log.info(
                "transaction check round: %d checked, %d without a live producer, %d discarded, %d immune; "
                "half queue at %d, op queue at %d",
                len(report.checked),
                len(report.unsent),
                len(report.discarded),
                report.immune,
                report.half_offset,
                report.op_offset,
            )
        return report

    async def _carry_out(self, result: ScanResult, half_saved: int, op_saved: int) -> RoundReport:
        b = self.broker
        report = RoundReport(half_offset=result.half_start, op_offset=result.op_start)
        complete = True
        for action in result.actions:
            if not await self._do(action, report):
                complete = False
                report.half_offset = action.offset  # the next round starts with this message
                break
            report.half_offset = action.next_half
        if complete:
            report.half_offset = result.half_offset
            report.op_offset = result.op_offset  # ops read past a stop would be lost: only when complete
        if report.half_offset != half_saved:
            save_progress(b.offsets, HALF_TOPIC, report.half_offset)
        if report.op_offset != op_saved:  # also when the scan moved past removed op messages
            save_progress(b.offsets, OP_TOPIC, report.op_offset)
        return report

    async def _do(self, action: Action, report: RoundReport) -> bool:
        uniq = action.record.properties.get(P.UNIQ_KEY, action.record.offset_msg_id)
        if action.kind == "discard":
            await self._discard(action)
            report.discarded.append(uniq)
            return True  # RocketMQ moves on whether or not the copy was written
        result = await put(self.broker, renewed(action.record, action.properties))
        if not result.ok or result.append is None:
            log.error(
                "re-putting half message %s (offset %d) failed: %s %s; the next round starts there",
                uniq,
                action.offset,
                result.status.value,
                result.remark,
            )
            return False
        if action.kind == "immunity":
            report.immune += 1
            return True
        if self._send_check(action, result.append):
            report.checked.append(uniq)
        else:
            report.unsent.append(uniq)
        return True

    async def _discard(self, action: Action) -> None:
        rec = action.record
        dest = real_destination(rec)
        log.error(
            "half message %s (real topic %s, offset %d, checked %s times) discarded: %s; moved to %s",
            rec.properties.get(P.UNIQ_KEY, rec.offset_msg_id),
            dest[0] if dest else "?",
            action.offset,
            rec.properties.get(P.TRANSACTION_CHECK_TIMES, "0"),
            action.reason,
            CHECK_MAX_TIME_TOPIC,
        )
        topics = self.broker.topics
        if topics.get(CHECK_MAX_TIME_TOPIC) is None:  # createTopicOfTranCheckMaxTime: 1 queue, RW
            topics.update(TopicConfig(CHECK_MAX_TIME_TOPIC, 1, 1, PERM_READ | PERM_WRITE))
        result = await put(self.broker, renewed(rec, action.properties, CHECK_MAX_TIME_TOPIC, 0))
        if not result.ok:
            log.error("moving it to %s failed: %s %s", CHECK_MAX_TIME_TOPIC, result.status.value, result.remark)

    def _channel(self, group: str) -> ClientChannel | None:
        """The next live producer connection of ``group``, in turn."""
        live = [ch for ch in self.broker.producers.groups.get(group, {}).values() if ch.connection.is_open]
        if not live:
            return None
        self._turn += 1
        return live[self._turn % len(live)]

    def _send_check(self, action: Action, copy: AppendResult) -> bool:
        """CHECK_TRANSACTION_STATE about the copy just written; False with nobody to ask."""
        rec, props = action.record, action.properties
        group = props.get(P.PGROUP)
        channel = self._channel(group) if group else None
        if channel is None:
            log.warning("transaction check of %s skipped: no live producer of group %s", props.get(P.UNIQ_KEY), group)
            return False
        dest = real_destination(rec) or (rec.topic, rec.queue_id)
        body = encode_record(
            topic=dest[0],
            body=rec.body,
            queue_id=dest[1],
            flag=rec.flag,
            properties=P.encode_properties(props),
            sysflag=rec.sysflag,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            store_host=rec.store_host,
            reconsume_times=rec.reconsume_times,
            queue_offset=copy.queue_offset,
            physical_offset=copy.wrote_offset,
            store_timestamp=copy.store_timestamp,
        )
        header = {
            "tranStateTableOffset": str(copy.queue_offset),
            "commitLogOffset": str(copy.wrote_offset),
            "offsetMsgId": copy.msg_ids[0],
        }
        uniq = props.get(P.UNIQ_KEY)
        if uniq:
            header["msgId"] = header["transactionId"] = uniq
        try:
            channel.connection.oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, bytes(body)))
        except Exception as exc:  # a connection closing under us: the next round asks again
            log.error("transaction check to %s (group %s) failed: %s", channel.connection.peer, group, exc)
            return False
        return True
