"""The controller's request processors, one small async function per request code.

``register(server, controller)`` puts them on a remoting server: the controller's Raft
address, and inside a name server the name server's own port. Writes become events in the
log (``ControllerNode.propose``); reads are answered from the leader's applied state.
Off the ready leader every request but GET_METADATA_INFO, BROKER_HEARTBEAT and
GET_CONTROLLER_CONFIG is answered CONTROLLER_NOT_LEADER, with the leader's id and address
in the remark and in GetMetaDataResponseHeader's fields (a client follows them without
asking GET_METADATA_INFO first). A missing or malformed header field is answered
CONTROLLER_INVALID_REQUEST naming it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ledgermq.controller.events import AlterSyncStateSet, ApplyBrokerId, CleanBrokerData, ElectMaster, RegisterBroker
from ledgermq.controller.failover import Failover
from ledgermq.controller.model import Result
from ledgermq.controller.node import ControllerNode, NotLeaderNow, ProposalFailed
from ledgermq.errors import ProtocolError
from ledgermq.net.connection import Connection
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    decode_broker_names,
)
from ledgermq.protocol.headers import MissingField
from ledgermq.protocol.headers_controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)

__all__ = ["Controller", "register"]

RC = ResponseCode


@dataclass(slots=True)
class Controller:
    """What the processors work with: the node and its leader duties."""

    node: ControllerNode
    failover: Failover


Handler = Callable[[Controller, RequestContext, RemotingCommand], Awaitable[RemotingCommand]]


def _guard(fn: Handler) -> Handler:
    """Header problems -> CONTROLLER_INVALID_REQUEST; off the leader -> CONTROLLER_NOT_LEADER;
    an event whose fate is unknown -> SYSTEM_ERROR saying so."""

    @functools.wraps(fn)
    async def run(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return await fn(c, ctx, cmd)
        except (MissingField, ProtocolError) as exc:
            return cmd.response(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        except NotLeaderNow as exc:
            return not_leader(c.node, cmd, str(exc))
        except ProposalFailed as exc:
            return cmd.response(RC.SYSTEM_ERROR, f"{exc}; the request may or may not have taken effect")

    return run


def metadata_header(node: ControllerNode) -> GetMetaDataResponseHeader:
    lead = node.leader()
    peers = "".join(f"{pid}:{addr};" for pid, addr in node.config.peer_addresses.items())
    return GetMetaDataResponseHeader(
        node.config.group, lead.leader_id, lead.leader_address, node.is_ready_leader, peers
    )


def not_leader(node: ControllerNode, cmd: RemotingCommand, why: str) -> RemotingCommand:
    lead = node.leader()
    where = f"the leader is {lead.leader_id} at {lead.leader_address}" if lead.leader_id else "no leader is known"
    return cmd.response(RC.CONTROLLER_NOT_LEADER, f"{why}; {where}", metadata_header(node).ext())


def _answer(
    cmd: RemotingCommand, result: Result, header: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    return cmd.response(result.code, result.remark, header or {}, body if result.code in _BODY_CODES else b"")


_BODY_CODES = (RC.SUCCESS, RC.CONTROLLER_MASTER_STILL_EXIST)


@_guard
async def alter_sync_state_set(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = AlterSyncStateSetRequestHeader.decode(cmd)
    sss = SyncStateSet.decode(cmd.body)
    result = await c.node.propose(
        AlterSyncStateSet(
            hdr.broker_name, hdr.master_broker_id, hdr.master_epoch, sss.sync_state_set, sss.sync_state_set_epoch
        )
    )
    if not result.ok:
        return _answer(cmd, result)
    body = SyncStateSet(result.sync_state_set or frozenset(), result.sync_state_set_epoch or 0).encode()
    return _answer(cmd, result, AlterSyncStateSetResponseHeader(result.sync_state_set_epoch or 0).ext(), body)


@_guard
async def elect_master(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = ElectMasterRequestHeader.decode(cmd)
    node, failover = c.node, c.failover
    event = ElectMaster(
        hdr.broker_name,
        hdr.broker_id,
        hdr.designate_elect,
        node.config.enable_elect_unclean_master,
        failover.liveness.candidates(hdr.broker_name, failover.now_ms()),
        failover.now_ms(),
    )
    result = await node.propose(event)
    if result.ok:
        failover.notify_role_changed(hdr.broker_name, result)
    header = ElectMasterResponseHeader(
        result.master_broker_id, result.master_address, result.master_epoch, result.sync_state_set_epoch
    ).ext()
    group = (
        BrokerMemberGroup(result.cluster_name or "", result.broker_name or "", dict(result.member_addrs))
        if result.member_addrs is not None
        else None
    )
    body = ElectMasterResponseBody(group, result.sync_state_set or frozenset()).encode()
    return _answer(cmd, result, header, body)


@_guard
async def register_broker(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = RegisterBrokerToControllerRequestHeader.decode(cmd)
    result = await c.node.propose(RegisterBroker(hdr.cluster_name, hdr.broker_name, hdr.broker_id, hdr.broker_address))
    header = RegisterBrokerToControllerResponseHeader(
        hdr.cluster_name,
        hdr.broker_name,
        result.master_broker_id,
        result.master_address,
        result.master_epoch,
        result.sync_state_set_epoch if result.master_broker_id is not None else None,
    ).ext()
    body = SyncStateSet(result.sync_state_set or frozenset(), result.sync_state_set_epoch or 0).encode()
    return _answer(cmd, result, header, body)


@_guard
async def get_replica_info(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetReplicaInfoRequestHeader.decode(cmd)
    await c.node.wait_ready()
    result = c.node.state.replica_info(hdr.broker_name)
    header = GetReplicaInfoResponseHeader(result.master_broker_id, result.master_address, result.master_epoch).ext()
    body = SyncStateSet(result.sync_state_set or frozenset(), result.sync_state_set_epoch or 0).encode()
    return _answer(cmd, result, header, body)


async def get_metadata_info(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(RC.SUCCESS, None, metadata_header(c.node).ext())


@_guard
async def get_sync_state_data(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    names = decode_broker_names(cmd.body) if cmd.body else []
    if not names:
        return cmd.response(RC.CONTROLLER_INVALID_REQUEST, "the body must be a JSON list of broker names")
    await c.node.wait_ready()
    table: dict[str, ReplicasInfo] = {}
    for name, g in c.node.state.sync_state_data(names).items():
        in_sync: list[ReplicaIdentity] = []
        not_in_sync: list[ReplicaIdentity] = []
        for broker_id, r in sorted(g.replicas.items()):
            ident = ReplicaIdentity(name, broker_id, r.address, r.alive)
            (in_sync if broker_id in g.sync_state_set else not_in_sync).append(ident)
        table[name] = ReplicasInfo(
            g.master_broker_id,
            g.master_address,
            g.master_epoch,
            g.sync_state_set_epoch,
            tuple(in_sync),
            tuple(not_in_sync),
        )
    return cmd.response(RC.SUCCESS, None, {}, BrokerReplicasInfo(table).encode())


@_guard
async def broker_heartbeat(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = BrokerHeartbeatRequestHeader.decode(cmd)
    if hdr.broker_id is None:
        return cmd.response(RC.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
    c.failover.on_heartbeat(
        hdr.cluster_name,
        hdr.broker_name,
        hdr.broker_id,
        hdr.broker_addr,
        timeout_ms=hdr.heartbeat_timeout_mills,
        epoch=hdr.epoch,
        max_offset=hdr.max_offset,
        confirm_offset=hdr.confirm_offset,
        election_priority=hdr.election_priority,
        connection=ctx.connection,
    )
    # ledgermq's addition: whether this node leads, so a master renews its write lease only
    # from the leader's answers (RocketMQ brokers ignore the extra fields)
    return cmd.response(RC.SUCCESS, "Heart beat success", metadata_header(c.node).ext())


@_guard
async def clean_broker_data(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = CleanControllerBrokerDataRequestHeader.decode(cmd)
    ids: frozenset[int] | None = None
    raw = (hdr.broker_controller_ids_to_clean or "").strip()
    if raw:
        try:
            ids = frozenset(int(part) for part in raw.split(";") if part.strip())
        except ValueError:
            return cmd.response(
                RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"brokerControllerIdsToClean {raw!r} is not a ';'-separated list of broker ids",
            )
    result = await c.node.propose(CleanBrokerData(hdr.broker_name, ids, hdr.is_clean_living_broker))
    return _answer(cmd, result)


@_guard
async def get_next_broker_id(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetNextBrokerIdRequestHeader.decode(cmd)
    await c.node.wait_ready()
    next_id = c.node.state.next_broker_id(hdr.broker_name)
    return cmd.response(
        RC.SUCCESS, None, GetNextBrokerIdResponseHeader(hdr.cluster_name, hdr.broker_name, next_id).ext()
    )


@_guard
async def apply_broker_id(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = ApplyBrokerIdRequestHeader.decode(cmd)
    result = await c.node.propose(
        ApplyBrokerId(hdr.cluster_name, hdr.broker_name, hdr.applied_broker_id, hdr.register_check_code)
    )
    return _answer(cmd, result, ApplyBrokerIdResponseHeader(hdr.cluster_name, hdr.broker_name).ext())


async def get_controller_config(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    text = "\n".join(f"{k}={v}" for k, v in c.node.config.properties().items())
    return cmd.response(RC.SUCCESS, None, {}, text.encode())


async def update_controller_config(c: Controller, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(
        RC.NO_PERMISSION, "ledgermq's controller does not change its config while running; edit the file and restart"
    )


_PROCESSORS: dict[RequestCode, Callable[[Controller, RequestContext, RemotingCommand], Awaitable[RemotingCommand]]] = {
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: alter_sync_state_set,
    RequestCode.CONTROLLER_ELECT_MASTER: elect_master,
    RequestCode.CONTROLLER_REGISTER_BROKER: register_broker,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: get_replica_info,
    RequestCode.CONTROLLER_GET_METADATA_INFO: get_metadata_info,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: get_sync_state_data,
    RequestCode.BROKER_HEARTBEAT: broker_heartbeat,
    RequestCode.UPDATE_CONTROLLER_CONFIG: update_controller_config,
    RequestCode.GET_CONTROLLER_CONFIG: get_controller_config,
    RequestCode.CLEAN_BROKER_DATA: clean_broker_data,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: get_next_broker_id,
    RequestCode.CONTROLLER_APPLY_BROKER_ID: apply_broker_id,
}


def register(server: RemotingServer, controller: Controller) -> None:
    """Answer the controller's requests on ``server``; a closed connection ends the liveness of
    the brokers whose heartbeats came on it."""
    for code, fn in _PROCESSORS.items():
        server.register(code, functools.partial(fn, controller))

    def closed(conn: Connection) -> None:
        controller.failover.on_connection_closed(conn)

    server.on_disconnect.append(closed)
