"""Headers of the name server's requests: broker registration, routes, topics, write
permission and the KV config, with their response headers. Names as RocketMQ 4.9's
namesrv header classes; the fields the name server does not use are not insisted on.
"""

from __future__ import annotations

from ledgermq.protocol.header_codec import (
    RequestHeader,
    ResponseHeader,
    boolean,
    int32,
    int64,
    request_header,
    response_header,
    text,
)


@request_header
class RegisterBrokerRequestHeader(RequestHeader):
    body_crc32: int = int64("bodyCrc32", absent=0)
    compressed: bool = boolean("compressed")
    cluster_name: str = text("clusterName")
    broker_addr: str = text("brokerAddr")
    broker_name: str = text("brokerName")
    broker_id: int = int64("brokerId")
    ha_server_addr: str = text("haServerAddr", absent="")


@response_header
class RegisterBrokerResponseHeader(ResponseHeader):
    ha_server_addr: str | None = text("haServerAddr")
    master_addr: str | None = text("masterAddr")


@request_header
class UnRegisterBrokerRequestHeader(RequestHeader):
    cluster_name: str = text("clusterName")
    broker_addr: str = text("brokerAddr")
    broker_name: str = text("brokerName")
    broker_id: int = int64("brokerId")


@request_header
class QueryDataVersionRequestHeader(RequestHeader):
    broker_addr: str = text("brokerAddr")


@response_header
class QueryDataVersionResponseHeader(ResponseHeader):
    changed: bool = boolean("changed")


@request_header
class GetRouteInfoRequestHeader(RequestHeader):
    topic: str = text("topic")
    accept_standard_json_only: bool = boolean("acceptStandardJsonOnly")  # RocketMQ 5; 4.x ignores it


@request_header
class GetTopicsByClusterRequestHeader(RequestHeader):
    cluster: str = text("cluster")


@request_header
class DeleteTopicFromNamesrvRequestHeader(RequestHeader):
    topic: str = text("topic")
    cluster_name: str | None = text("clusterName", absent=None)


@request_header
class BrokerNameRequestHeader(RequestHeader):
    """WipeWritePermOfBrokerRequestHeader and AddWritePermOfBrokerRequestHeader."""

    broker_name: str = text("brokerName")


WipeWritePermOfBrokerRequestHeader = BrokerNameRequestHeader
AddWritePermOfBrokerRequestHeader = BrokerNameRequestHeader


@response_header
class WipeWritePermOfBrokerResponseHeader(ResponseHeader):
    wipe_topic_count: int = int32("wipeTopicCount")


@response_header
class AddWritePermOfBrokerResponseHeader(ResponseHeader):
    add_topic_count: int = int32("addTopicCount")


@request_header
class PutKVConfigRequestHeader(RequestHeader):
    namespace: str = text("namespace")
    key: str = text("key")
    value: str = text("value")


@request_header
class KVConfigRequestHeader(RequestHeader):
    """GetKVConfigRequestHeader and DeleteKVConfigRequestHeader."""

    namespace: str = text("namespace")
    key: str = text("key")


GetKVConfigRequestHeader = KVConfigRequestHeader
DeleteKVConfigRequestHeader = KVConfigRequestHeader


@request_header
class GetKVListByNamespaceRequestHeader(RequestHeader):
    namespace: str = text("namespace")


@response_header
class GetKVConfigResponseHeader(ResponseHeader):
    value: str = text("value")
