"""NOTIFY_BROKER_ROLE_CHANGED (1008, from the controller) and GET_BROKER_EPOCH_CACHE (1007).

The notification is oneway: it is handed to the controller-mode service, which takes the
new role in the background if the master epoch is newer than the one it holds (an old or
repeated notification changes nothing). A broker outside controller mode answers a
notification that asks for an answer with REQUEST_CODE_NOT_SUPPORTED.

GET_BROKER_EPOCH_CACHE is answered by every broker from its HA epoch file (ha/epoch_file.py)
in RocketMQ's EpochEntryCache shape: the epochs with their start offsets, each ending where
the next begins (the last at Long.MAX_VALUE), the broker's id (its controller-assigned id in
controller mode, else brokerId) and its commit log's end.
"""

from __future__ import annotations

import asyncio

from ledgermq.broker.context import Broker
from ledgermq.broker.controller_mode.service import MasterView
from ledgermq.ha.epoch_file import EpochFile
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import JAVA_LONG_MAX, EpochEntry, EpochEntryCache, SyncStateSet
from ledgermq.protocol.headers_controller import NotifyBrokerRoleChangedRequestHeader


def notify_broker_role_changed(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
    service = broker.controller
    if service is None:
        return (
            None
            if cmd.is_oneway
            else cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "this broker is not in controller mode (enableControllerMode)"
            )
        )
    hdr = NotifyBrokerRoleChangedRequestHeader.decode(cmd)
    sss = SyncStateSet.decode(cmd.body) if cmd.body else SyncStateSet(frozenset(), 0)
    service.on_notify(
        MasterView(
            hdr.master_broker_id,
            hdr.master_address,
            hdr.master_epoch or 0,
            sss.sync_state_set,
            hdr.sync_state_set_epoch or sss.sync_state_set_epoch,
        )
    )
    return None if cmd.is_oneway else cmd.response(ResponseCode.SUCCESS)


async def get_broker_epoch_cache(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    state = await asyncio.to_thread(EpochFile(broker.store.root).load)
    entries = state.epochs.entries
    listed = tuple(
        EpochEntry(e.number, e.start, entries[i + 1].start if i + 1 < len(entries) else JAVA_LONG_MAX)
        for i, e in enumerate(entries)
    )
    service = broker.controller
    broker_id = service.broker_id if service is not None and service.broker_id is not None else broker.config.broker_id
    cfg = broker.config
    body = EpochEntryCache(cfg.cluster_name, cfg.broker_name, broker_id, listed, broker.store.max_phy_offset)
    return cmd.response(ResponseCode.SUCCESS, body=body.encode())


PROCESSORS = {
    RequestCode.NOTIFY_BROKER_ROLE_CHANGED: notify_broker_role_changed,
    RequestCode.GET_BROKER_EPOCH_CACHE: get_broker_epoch_cache,
}
