"""Name-server request processors: each a small async function registered by request code."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledgermq.clock import Clock
from ledgermq.errors import ProtocolError
from ledgermq.namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfig
from ledgermq.namesrv.routeinfo import RouteInfo
from ledgermq.net.server import Processor, RemotingServer, RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers import MissingField
from ledgermq.protocol.headers_namesrv import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from ledgermq.protocol.register_body import decode_register_body
from ledgermq.protocol.route import DataVersion


@dataclass(slots=True)
class NamesrvState:
    routes: RouteInfo
    kv: KVConfig
    clock: Clock


def _guard(fn: Callable[[NamesrvState, RequestContext, RemotingCommand], Any]) -> Callable[..., Any]:
    """Turn a missing header field into a clear SYSTEM_ERROR answer."""

    async def run(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            result: RemotingCommand | None = await fn(state, ctx, cmd)
            return result
        except (MissingField, ProtocolError) as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))

    return run


@_guard
async def register_broker(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = RegisterBrokerRequestHeader.decode(cmd)
    crc = hdr.body_crc32
    if crc and (zlib.crc32(cmd.body) & 0x7FFFFFFF) != crc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    # Decoded in full before anything is applied: a corrupt body changes nothing.
    body = decode_register_body(cmd.body, hdr.compressed)
    result = state.routes.register_broker(
        cluster=hdr.cluster_name,
        broker_addr=hdr.broker_addr,
        broker_name=hdr.broker_name,
        broker_id=hdr.broker_id,
        ha_server_addr=hdr.ha_server_addr,
        data_version=body.data_version,
        topic_configs=body.topic_configs,
        now_ms=state.clock.wall_ms(),
        connection_id=ctx.connection,
    )
    order = state.kv.namespace(ORDER_TOPIC_CONFIG)
    return cmd.response(
        ResponseCode.SUCCESS,
        ext_fields=RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr).ext(),
        body=fastjson.dumps({"table": order}) if order else b"",
    )


@_guard
async def unregister_broker(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = UnRegisterBrokerRequestHeader.decode(cmd)
    state.routes.unregister_broker(
        cluster=hdr.cluster_name,
        broker_addr=hdr.broker_addr,
        broker_name=hdr.broker_name,
        broker_id=hdr.broker_id,
    )
    return cmd.response(ResponseCode.SUCCESS)


@_guard
async def query_data_version(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    addr = QueryDataVersionRequestHeader.decode(cmd).broker_addr
    version = DataVersion.from_json(fastjson.loads(cmd.body) if cmd.body else None)
    changed = state.routes.is_topic_config_changed(addr, version)
    live = state.routes.live.get(addr)
    if not changed and live is not None:
        live.last_update_ms = state.clock.wall_ms()
    body = fastjson.dumps(live.data_version.to_json()) if live is not None else b""
    return cmd.response(ResponseCode.SUCCESS, ext_fields=QueryDataVersionResponseHeader(changed).ext(), body=body)


@_guard
async def get_route(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetRouteInfoRequestHeader.decode(cmd).topic
    route = state.routes.route(topic)
    if route is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")
    order = state.kv.get(ORDER_TOPIC_CONFIG, topic)
    if order:
        route.order_topic_conf = order
    return cmd.response(ResponseCode.SUCCESS, body=route.encode())


@_guard
async def cluster_info(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(state.routes.cluster_info()))


@_guard
async def all_topics(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"topicList": state.routes.topic_list()}))


@_guard
async def topics_by_cluster(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    topics = state.routes.topics_by_cluster(GetTopicsByClusterRequestHeader.decode(cmd).cluster)
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"topicList": topics}))


@_guard
async def system_topics(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    names = sorted(set(state.routes.clusters) | set(state.routes.brokers))
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"topicList": names}))


@_guard
async def delete_topic(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = DeleteTopicFromNamesrvRequestHeader.decode(cmd)
    state.routes.delete_topic(hdr.topic, hdr.cluster_name or None)
    return cmd.response(ResponseCode.SUCCESS)


@_guard
async def wipe_write_perm(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    name = WipeWritePermOfBrokerRequestHeader.decode(cmd).broker_name
    count = state.routes.set_write_perm(name, writable=False)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=WipeWritePermOfBrokerResponseHeader(count).ext())


@_guard
async def add_write_perm(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    name = AddWritePermOfBrokerRequestHeader.decode(cmd).broker_name
    count = state.routes.set_write_perm(name, writable=True)
    return cmd.response(ResponseCode.SUCCESS, ext_fields=AddWritePermOfBrokerResponseHeader(count).ext())


@_guard
async def put_kv(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = PutKVConfigRequestHeader.decode(cmd)
    state.kv.put(hdr.namespace, hdr.key, hdr.value)
    return cmd.response(ResponseCode.SUCCESS)


@_guard
async def get_kv(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = GetKVConfigRequestHeader.decode(cmd)
    namespace, key = hdr.namespace, hdr.key
    value = state.kv.get(namespace, key)
    if value is None:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
    return cmd.response(ResponseCode.SUCCESS, ext_fields=GetKVConfigResponseHeader(value).ext())


@_guard
async def delete_kv(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = DeleteKVConfigRequestHeader.decode(cmd)
    state.kv.delete(hdr.namespace, hdr.key)
    return cmd.response(ResponseCode.SUCCESS)


@_guard
async def kv_list(state: NamesrvState, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    namespace = GetKVListByNamespaceRequestHeader.decode(cmd).namespace
    table = state.kv.namespace(namespace)
    if table is None:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"table": table}))


PROCESSORS: dict[int, Callable[..., Any]] = {
    RequestCode.REGISTER_BROKER: register_broker,
    RequestCode.UNREGISTER_BROKER: unregister_broker,
    RequestCode.QUERY_DATA_VERSION: query_data_version,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route,
    RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: all_topics,
    RequestCode.GET_TOPICS_BY_CLUSTER: topics_by_cluster,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: system_topics,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: delete_topic,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: wipe_write_perm,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: add_write_perm,
    RequestCode.PUT_KV_CONFIG: put_kv,
    RequestCode.GET_KV_CONFIG: get_kv,
    RequestCode.DELETE_KV_CONFIG: delete_kv,
    RequestCode.GET_KVLIST_BY_NAMESPACE: kv_list,
}


def register_all(server: RemotingServer, state: NamesrvState) -> None:
    for code, fn in PROCESSORS.items():
        server.register(code, _bind(fn, state))


def _bind(fn: Callable[..., Any], state: NamesrvState) -> Processor:
    async def processor(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        result: RemotingCommand | None = await fn(state, ctx, cmd)
        return result

    return processor
