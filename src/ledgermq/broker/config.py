"""Broker settings (RocketMQ ``BrokerConfig`` / ``NettyServerConfig`` keys)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ledgermq.config import key
from ledgermq.errors import ConfigError


def _default_ip() -> str:
    return "127.0.0.1"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    cluster_name: str = key("brokerClusterName", "DefaultCluster")
    broker_name: str = key("brokerName", socket.gethostname())
    broker_id: int = key("brokerId", 0)
    broker_ip1: str = key("brokerIP1", _default_ip())
    broker_ip2: str = key("brokerIP2", "")
    listen_port: int = key("listenPort", 10911)
    listen_host: str = key("listenHost", "0.0.0.0")
    ha_listen_port: int = key("haListenPort", 0)  # 0: listenPort + 1
    namesrv_addr: str = key("namesrvAddr", "")
    auto_create_topic_enable: bool = key("autoCreateTopicEnable", True)
    auto_create_subscription_group: bool = key("autoCreateSubscriptionGroup", True)
    default_topic_queue_nums: int = key("defaultTopicQueueNums", 8)
    broker_permission: int = key("brokerPermission", 6)
    register_name_server_period_ms: int = key("registerNameServerPeriod", 30_000)
    register_broker_timeout_ms: int = key("registerBrokerTimeoutMills", 6000)
    # RocketMQ defaults forceRegister to true: every period sends the whole table to every
    # name server. ledgermq asks QUERY_DATA_VERSION first and sends the table only where
    # the name server's version differs; true restores RocketMQ's behaviour.
    force_register: bool = key("forceRegister", False)
    # RocketMQ defaults compressedRegister to false. ledgermq compresses full registrations
    # of COMPRESS_MIN_TOPICS topics or more (4.9's deflated layout, which every 4.3+ name
    # server reads); false sends plain JSON always, for older name servers.
    compressed_register: bool = key("compressedRegister", True)
    long_polling_enable: bool = key("longPollingEnable", True)
    short_polling_time_ms: int = key("shortPollingTimeMills", 1000)
    flush_consumer_offset_interval_ms: int = key("flushConsumerOffsetInterval", 5000)
    channel_expired_timeout_ms: int = key("channelExpiredTimeout", 120_000)
    max_frame_size: int = key("frameMaxLength", 16 * 1024 * 1024)
    max_inflight_per_connection: int = key("maxInflightPerConnection", 256)
    max_inflight_total: int = key("maxInflightTotal", 10_000)
    region_id: str = key("regionId", "DefaultRegion")
    trace_on: bool = key("traceOn", True)
    max_reconsume_times: int = key("maxReconsumeTimes", 16)
    slave_sync_interval_ms: int = key("slaveSyncInterval", 10_000)  # ledgermq: RocketMQ hard-codes 10 s
    # Lets consumers subscribe with SQL92 property expressions (off by default, as in RocketMQ).
    enable_property_filter: bool = key("enablePropertyFilter", False)
    metrics_port: int = key("metricsPort", 0)  # ledgermq: Prometheus /metrics; 0 disables
    # ledgermq: where /metrics listens; empty: listenHost, like every other server of the broker.
    metrics_host: str = key("metricsHost", "")
    # Transactional messages (RocketMQ 4.9 BrokerConfig; docs/transactions.md)
    transaction_timeout_ms: int = key("transactionTimeOut", 6000)  # a half message's age before its first check
    transaction_check_max: int = key("transactionCheckMax", 15)  # checks before it is discarded
    transaction_check_interval_ms: int = key("transactionCheckInterval", 60_000)
    reject_transaction_message: bool = key("rejectTransactionMessage", False)
    # Access control (docs/acl.md): RocketMQ's aclEnable and rocketmqHome; the rest are ledgermq's.
    acl_enable: bool = key("aclEnable", False)
    rocketmq_home: str = key("rocketmqHome", "")  # empty: $ROCKETMQ_HOME
    acl_file: str = key("aclFile", "")  # empty: <rocketmqHome>/conf/plain_acl.yml
    # The credentials this broker signs its own requests to other brokers with (a slave's
    # metadata sync, a master reading its slaves' offsets); empty: unsigned, as RocketMQ.
    acl_access_key: str = key("aclAccessKey", "")
    acl_secret_key: str = key("aclSecretKey", "")

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ConfigError("brokerId must be 0 (master) or a positive slave id")
        if not 0 < self.listen_port < 65536:
            raise ConfigError("listenPort must be within 1..65535")
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError("metricsPort must be within 0..65535 (0 disables metrics)")
        if not self.broker_name:
            raise ConfigError("brokerName must not be empty")
        if self.transaction_check_interval_ms <= 0:
            raise ConfigError("transactionCheckInterval must be a positive number of milliseconds")
        if self.transaction_timeout_ms < 0 or self.transaction_check_max < 0:
            raise ConfigError("transactionTimeOut and transactionCheckMax must not be negative")
        if bool(self.acl_access_key) != bool(self.acl_secret_key):
            raise ConfigError("aclAccessKey and aclSecretKey go together: set both or neither")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_port(self) -> int:
        return self.ha_listen_port or self.listen_port + 1

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def acl_credentials(self) -> tuple[str, str] | None:
        return (self.acl_access_key, self.acl_secret_key) if self.acl_access_key else None

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0
