"""The producer's settings (Java's ``DefaultMQProducer`` options in snake case), defined
once: a frozen dataclass checked when it is made, so a bad value fails at once rather than
in a send later. ``Producer``'s keyword arguments are these fields. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ledgermq.acl.signing import Credentials
from ledgermq.client.errors import MQClientError
from ledgermq.client.instance.publish_info import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.client.producer.outgoing import COMPRESS_LEVEL, COMPRESS_OVER, MAX_MESSAGE_SIZE
from ledgermq.client.tls import TlsOptions, check_tls_options

__all__ = [
    "ASYNC_SEND_MAX_BYTES",
    "ASYNC_SEND_MAX_INFLIGHT",
    "COMPRESS_LEVEL",
    "COMPRESS_OVER",
    "MAX_MESSAGE_SIZE",
    "ProducerSettings",
]

# The asynchronous sends' budget: in flight at once, and their bytes.
ASYNC_SEND_MAX_INFLIGHT = 256
ASYNC_SEND_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ProducerSettings:
    """Times in seconds. ``client_ip`` "" means this host's address (looked up by the
    producer); ``failover`` governs following a moved master (``FailoverSettings``)."""

    group: str
    namesrv_addrs: str | Sequence[str]
    send_timeout: float = 3.0
    retry_times: int = 2
    retry_times_when_send_async_failed: int = 2
    async_send_max_inflight: int = ASYNC_SEND_MAX_INFLIGHT
    async_send_max_bytes: int = ASYNC_SEND_MAX_BYTES
    compress_over: int = COMPRESS_OVER
    compress_level: int = COMPRESS_LEVEL
    max_message_size: int = MAX_MESSAGE_SIZE
    send_latency_fault_enable: bool = False
    retry_another_broker_when_not_store_ok: bool = False
    poll_namesrv_interval: float = 30.0
    heartbeat_interval: float = 30.0
    api_timeout: float = 3.0
    create_topic_key: str = AUTO_CREATE_TOPIC
    default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    client_ip: str = ""
    instance_name: str = "DEFAULT"
    failover: FailoverSettings = field(default_factory=FailoverSettings)
    credentials: Credentials | None = None  # ACL: every request of the client instance is signed
    use_tls: bool = False  # Java's useTLS (client/tls.py)
    tls: TlsOptions | None = None  # with use_tls: the CA and the client certificate

    def __post_init__(self) -> None:
        check_tls_options(self.use_tls, self.tls)
        if not self.group:
            raise MQClientError("the producer group is blank")
        if self.retry_times < 0 or self.retry_times_when_send_async_failed < 0:
            raise MQClientError("retry_times and retry_times_when_send_async_failed must be 0 or more")
        if self.failover is None:  # callers pass None for "the default"
            object.__setattr__(self, "failover", FailoverSettings())
        if self.client_ip is None:  # the same: None means "this host's"
            object.__setattr__(self, "client_ip", "")
