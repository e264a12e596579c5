"""The requests a broker sends its name servers (REGISTER_BROKER, QUERY_DATA_VERSION,
UNREGISTER_BROKER), built from the broker's config and topics; no I/O here.

Three registration bodies, as RocketMQ 4.9's BrokerController sends them:

* full: every topic (``registerBrokerAll``), deflated once the table is large;
* increment: only the topics that changed, with the new data version
  (``registerIncrementBrokerData``); name servers upsert, so the rest stay;
* slave: no topics at all. Name servers read topics only from brokerId 0 (RouteInfoManager
  ``registerBroker``), so a slave's periodic registration, which it needs for the master
  address in the answer, need not carry a table nobody reads.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.register_body import encode_compressed
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, DataVersion, RegisterBrokerBody, TopicConfig

COMPRESS_MIN_TOPICS = 64
"""Full registrations of this many topics or more go deflated (with compressedRegister):
below it the saving is a few KB, and the plain form keeps each topic's sysFlag."""


def advertised(tc: TopicConfig, broker_permission: int) -> TopicConfig:
    """A broker that may not write (or read) advertises its topics so (RocketMQ masks the
    same way in registerBrokerAll and registerIncrementBrokerData)."""
    if broker_permission & PERM_WRITE and broker_permission & PERM_READ:
        return tc
    return TopicConfig(
        tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm & broker_permission,
        tc.topic_filter_type, tc.topic_sys_flag, tc.order,
    )  # fmt: skip


def _identity(cfg: BrokerConfig) -> dict[str, object]:
    return {
        "brokerAddr": cfg.broker_addr,
        "brokerId": cfg.broker_id,
        "brokerName": cfg.broker_name,
        "clusterName": cfg.cluster_name,
    }


def register_command(cfg: BrokerConfig, body: bytes, compressed: bool) -> RemotingCommand:
    """REGISTER_BROKER with bodyCrc32 (4.9's BrokerOuterAPI sets it; name servers refuse a
    body whose CRC differs)."""
    ext = {
        **_identity(cfg),
        "haServerAddr": cfg.ha_server_addr,
        "compressed": compressed,
        "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


def full_registration(cfg: BrokerConfig, topics: TopicConfigManager) -> RemotingCommand:
    """Every topic (none for a slave), deflated when large and compressedRegister allows."""
    if not cfg.is_master:
        return register_command(cfg, RegisterBrokerBody(topics.data_version, {}).encode(), False)
    perm = cfg.broker_permission
    table = {name: advertised(tc, perm) for name, tc in topics.table.items()}
    body = RegisterBrokerBody(topics.data_version, table)
    if cfg.compressed_register and len(table) >= COMPRESS_MIN_TOPICS:
        return register_command(cfg, encode_compressed(body), True)
    return register_command(cfg, body.encode(), False)


def increment_registration(
    cfg: BrokerConfig, topics: TopicConfigManager, names: Iterable[str], version: DataVersion
) -> RemotingCommand:
    """The named topics as they are now (one deleted since is left out), plain JSON."""
    perm = cfg.broker_permission
    table = {name: advertised(tc, perm) for name in names if (tc := topics.table.get(name)) is not None}
    return register_command(cfg, RegisterBrokerBody(version, table).encode(), False)


def query_data_version(cfg: BrokerConfig, version: DataVersion) -> RemotingCommand:
    """QUERY_DATA_VERSION: the name server answers whether its copy of our version differs,
    and, when it does not, counts the query as our heartbeat."""
    return RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, _identity(cfg), fastjson.dumps(version.to_json()))


def unregister_command(cfg: BrokerConfig) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, _identity(cfg))
