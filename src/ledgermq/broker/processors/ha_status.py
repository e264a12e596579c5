"""GET_BROKER_HA_STATUS (907, a RocketMQ 5.x code): the HARuntimeInfo ``mqadmin haStatus`` prints.

The body is HARuntimeInfo as fastjson writes it: ``master``, ``masterCommitLogMaxOffset``,
``inSyncSlaveNums``, ``haConnectionInfo`` (one HAConnectionRuntimeInfo per slave: ``addr``,
``slaveAckOffset``, ``diff``, ``inSync``, ``transferredByteInSecond``, ``transferFromWhere``)
and ``haClientRuntimeInfo`` (a slave's view: ``masterAddr``, ``maxOffset``,
``lastReadTimestamp``, ``lastWriteTimestamp``, ``transferredByteInSecond``,
``masterFlushOffset``). Java readers ignore the fields we add:

* per slave: ``connected`` (RocketMQ lists live connections only; we also keep the last few
  that went away, with ``closedReason``), ``lastAckTimestamp`` (wall ms of the slave's
  latest report, 0 if none), ``lagTimeMillis`` (age of the oldest message the slave has
  not acknowledged: 0 when caught up, -1 when unknown) and ``brokerId`` (controller mode: the
  slave's controller-assigned id, else null); in controller mode ``inSync`` means a connected
  member of the SyncStateSet the controller accepted (RocketMQ 5's AutoSwitchHAService), not
  the lag rule of master-slave mode;
* for a slave: ``connected``, ``reportedOffset``, ``connects`` and ``lastError``;
* on both: ``damagedRanges`` (commit-log ranges the store refuses until a replica repairs
  them), ``unrepaired`` ("no replica holds [a, b): why"), ``repairsTaken`` /
  ``repairBytesTaken`` (ranges rewritten here from a peer's bytes), ``repairsGiven`` /
  ``repairBytesGiven`` (ranges a master sent a slave), ``repairsExpired`` /
  ``repairBytesExpired`` (damaged ranges a slave let go because its master's retention had
  deleted them) and ``lastRepair``.

We measure no transfer rate, so ``transferredByteInSecond`` is 0; a 4.x master does not
send its flushed offset, so ``masterFlushOffset`` is 0.

A master answers from ``broker.ha``; a slave from its HAClient, ``broker.ha_client``. A
broker with neither answers a neutral body (by its role, with no slave and no master address), not an error.
"""

from __future__ import annotations

import logging
from typing import Any

from ledgermq.broker.context import Broker
from ledgermq.errors import LedgerError
from ledgermq.ha.master import HAService
from ledgermq.ha.master_link import SlaveStatus
from ledgermq.ha.repair_book import RepairBook
from ledgermq.ha.slave import HAClient
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_record
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)


def _store_timestamp(broker: Broker, offset: int) -> int:
    """Store time of the first message at or after ``offset`` (past a segment's blank end); -1 if none."""
    seg = broker.store_config.mapped_file_size_commitlog
    store = broker.store
    for off in dict.fromkeys((offset, offset - offset % seg + seg)):
        try:
            rec = store.look_message_by_offset(off)
            if rec is not None:
                return decode_record(rec, check_crc=False).store_timestamp
        except (LedgerError, OSError, ValueError) as exc:
            log.debug("haStatus: no message at %d: %s", off, exc)
    return -1


def _connection_info(
    broker: Broker, ha: HAService, s: SlaveStatus, master_max: int, now_ms: int, members: frozenset[int] | None
) -> dict[str, Any]:
    acked = s.acked_offset
    diff = master_max - max(acked, 0)  # from the current max, also for a slave that went away
    if acked < 0:
        lag_ms = -1
    elif diff <= 0:
        lag_ms = 0
    else:
        oldest = _store_timestamp(broker, acked)
        lag_ms = max(0, now_ms - oldest) if oldest > 0 else -1
    return {
        "addr": s.address,
        "slaveAckOffset": acked,
        "diff": diff,
        "inSync": _in_sync(ha, s, diff, members),
        "transferredByteInSecond": 0,
        "transferFromWhere": s.transfer_offset,
        "connected": s.connected,
        "lastAckTimestamp": s.last_ack_time_ms,
        "lagTimeMillis": lag_ms,
        "closedReason": s.closed_reason,
        "brokerId": s.broker_id,
    }


def _in_sync(ha: HAService, s: SlaveStatus, diff: int, members: frozenset[int] | None) -> bool:
    """Master-slave mode: connected and within haSlaveFallbehindMax. Controller mode
    (``members``: the SyncStateSet the controller accepted): a connected member, as
    RocketMQ 5's AutoSwitchHAService counts it; lag alone does not make a slave in sync
    there, the controller's acceptance does."""
    if members is not None:
        return s.connected and s.broker_id is not None and s.broker_id in members
    return s.connected and s.acked_offset >= 0 and diff < ha.config.slave_fallbehind_max


def _sync_state_set(broker: Broker) -> frozenset[int] | None:
    ctl = broker.controller
    tracker = ctl.tracker if ctl is not None else None
    return tracker.accepted.members if tracker is not None else None


def _client_info(client: HAClient | None, local_max: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "masterAddr": "",
        "maxOffset": local_max,
        "lastReadTimestamp": 0,
        "lastWriteTimestamp": 0,
        "transferredByteInSecond": 0,
        "masterFlushOffset": 0,
        "connected": False,
        "reportedOffset": -1,
        "connects": 0,
        "lastError": "",
        "epoch": 0,
        "truncations": 0,
        "truncatedBytes": 0,
        "refused": "",
        "servedBytes": 0,
    }
    if client is None:
        return info
    st = client.status()
    info.update(
        masterAddr=st.master_address,
        maxOffset=st.local_max_offset,
        connected=st.connected,
        reportedOffset=st.reported_offset,
        connects=st.connects,
        lastError=st.last_error,
        epoch=st.epoch,
        truncations=st.truncations,
        truncatedBytes=st.truncated_bytes,
        refused=st.refused,
        servedBytes=st.served_bytes,
    )
    session = client.session
    if session is not None:  # the session keeps monotonic seconds; show wall-clock ms
        now_wall, now_mono = client.clock.wall_ms(), client.clock.monotonic()
        info["lastReadTimestamp"] = now_wall - int((now_mono - session.last_read) * 1000)
        if session.reported is not None:
            info["lastWriteTimestamp"] = now_wall - int((now_mono - session.last_report) * 1000)
    return info


def ha_runtime_info(broker: Broker) -> dict[str, Any]:
    """HARuntimeInfo of this broker as a JSON-ready dict."""
    local_max = broker.store.max_phy_offset
    ha_client = broker.ha_client
    ha = broker.ha
    is_master = ha is not None or (ha_client is None and not broker.store_config.is_slave)
    connections: list[dict[str, Any]] = []
    if ha is not None:
        now_ms = broker.clock.wall_ms()
        members = _sync_state_set(broker)
        connections = [_connection_info(broker, ha, s, local_max, now_ms, members) for s in ha.status()]
    return {
        "master": is_master,
        "masterCommitLogMaxOffset": local_max if is_master else 0,
        "inSyncSlaveNums": sum(1 for c in connections if c["inSync"]),
        "haConnectionInfo": connections,
        "haClientRuntimeInfo": _client_info(None if is_master else ha_client, local_max),
        # ledgermq's own: epochs and the recovery of a master that lost its tail (ha/epochs.py)
        "epoch": ha.epochs.last_epoch if ha is not None else 0,
        "recovering": ha.recovering if ha is not None else False,
        "writeFence": _write_fence(broker),
        "recoveryNote": ha.recovery_note if ha is not None else "",
        "truncatedSlaves": ha.truncated_slaves if ha is not None else 0,
        "tookBackBytes": ha.took_back_bytes if ha is not None else 0,
        **_repair_info(ha.repairs if ha is not None else ha_client.repairs if ha_client is not None else None),
    }


def _write_fence(broker: Broker) -> str:
    """Why the store refuses puts for now (a recovering master); DLedger mode has no fence."""
    store = broker.store
    return (store.write_fence or "") if isinstance(store, NativeMessageStore) else ""


def _repair_info(book: RepairBook | None) -> dict[str, Any]:
    if book is None:
        return {"damagedRanges": [], "unrepaired": [], "repairsTaken": 0, "repairBytesTaken": 0,
                "repairsGiven": 0, "repairBytesGiven": 0, "repairsExpired": 0, "repairBytesExpired": 0,
                "lastRepair": ""}  # fmt: skip
    st = book.status()
    return {
        "damagedRanges": [list(r) for r in st.damaged],
        "unrepaired": st.unrepaired,
        "repairsTaken": st.taken,
        "repairBytesTaken": st.taken_bytes,
        "repairsGiven": st.given,
        "repairBytesGiven": st.given_bytes,
        "repairsExpired": st.expired,
        "repairBytesExpired": st.expired_bytes,
        "lastRepair": st.last,
    }


def get_broker_ha_status(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(ha_runtime_info(broker)))


PROCESSORS = {
    RequestCode.GET_BROKER_HA_STATUS: get_broker_ha_status,
}
