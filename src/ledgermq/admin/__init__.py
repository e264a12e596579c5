"""Administration over the RocketMQ 4.x protocol: an async client for name servers and
brokers (what ``mqadmin`` does), shared by ``ledgermq admin``, the client library and
the Spark source."""

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import (
    AdminConnectError,
    AdminError,
    AdminResponseError,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    OffsetWrapper,
    QueryResult,
    TopicOffset,
)

__all__ = [
    "AdminClient",
    "AdminConnectError",
    "AdminError",
    "AdminResponseError",
    "ClusterInfo",
    "ConsumeStats",
    "ConsumerConnection",
    "OffsetWrapper",
    "QueryResult",
    "TopicOffset",
]
