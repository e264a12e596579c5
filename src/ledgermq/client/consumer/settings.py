"""The settings both consumers share, defined once: a frozen dataclass checked when it is
made (Java's ``Validators.checkGroup`` and the common part of ``checkConfig``), so a bad
value fails at once rather than in a pull loop later, and so no part can change a setting
behind the others' backs. ``PushSettings`` and ``LitePullSettings`` add each consumer's own.

Names are Java's in snake case; both consumers' keyword arguments are these fields, so a
configuration moves between the Java client and this one unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from ledgermq.acl.signing import Credentials
from ledgermq.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from ledgermq.client.consumer.common import ConsumeFromWhere, MessageModel, check_group
from ledgermq.client.errors import MQClientError
from ledgermq.client.tls import TlsOptions, check_tls_options

__all__ = ["ConsumerSettings", "check_range", "settings_of"]

S = TypeVar("S", bound="ConsumerSettings")


@dataclass(frozen=True, kw_only=True)
class ConsumerSettings:
    """What a push and a lite pull consumer both are: a group member on some name servers,
    with a message model, a start position, an allocation strategy, pull sizes and the
    client instance's timings. ``client_ip`` defaults to this host's address and
    ``allocate_strategy`` to averaging (the address is looked up by the consumer when it
    is made, ``with_client_ip``: these settings stay free of I/O)."""

    group: str
    namesrv_addrs: str | Sequence[str]
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp: str | int | None = None
    allocate_strategy: AllocateStrategy = field(default_factory=AllocateMessageQueueAveragely)
    pull_batch_size: int = 32
    consume_message_batch_max_size: int = 1
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    instance_name: str = "DEFAULT"
    client_ip: str = ""  # "" until the consumer fills in this host's address
    api_timeout: float = 3.0
    poll_namesrv_interval: float = 30.0
    heartbeat_interval: float = 30.0
    rebalance_interval: float = 20.0
    credentials: Credentials | None = None  # ACL: every request of the client instance is signed
    use_tls: bool = False  # Java's useTLS (client/tls.py)
    tls: TlsOptions | None = None  # with use_tls: the CA and the client certificate

    def __post_init__(self) -> None:
        check_tls_options(self.use_tls, self.tls)
        check_group(self.group)
        if self.allocate_strategy is None:  # callers pass None for "the default"
            self._set(allocate_strategy=AllocateMessageQueueAveragely())

    def _set(self, **values: Any) -> None:
        """Normalise a field while the object is made (frozen afterwards)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)

    @property
    def namesrv_addr_text(self) -> str:
        """The name server addresses as Java's ``namesrvAddr`` writes them."""
        addrs = self.namesrv_addrs
        return addrs if isinstance(addrs, str) else ";".join(addrs)

    def instance_options(self) -> dict[str, Any]:
        """What ``ClientInstance.acquire`` takes from the settings (the caller adds the
        persist interval, the clock and the random source)."""
        return {
            "client_ip": self.client_ip,
            "instance_name": self.instance_name,
            "api_timeout": self.api_timeout,
            "poll_namesrv_interval": self.poll_namesrv_interval,
            "heartbeat_interval": self.heartbeat_interval,
            "rebalance_interval": self.rebalance_interval,
            "credentials": self.credentials,
            "use_tls": self.use_tls,
            "tls": self.tls,
        }


def check_range(name: str, value: float, low: float, high: float) -> None:
    """Java's range checks of ``checkConfig``, with its message."""
    if not low <= value <= high:
        raise MQClientError(f"{name} is out of range [{low}, {high}]: {value}")


def settings_of(
    cls: type[S],
    settings: S | None,
    group: str | None,
    namesrv_addrs: str | Sequence[str] | None,
    options: dict[str, Any],
) -> S:
    """A consumer facade's settings: ``settings=`` as given, or made of the keyword
    arguments (the settings' fields), never a mix of the two."""
    if settings is not None:
        if group is not None or namesrv_addrs is not None or options:
            raise TypeError(f"give either settings= or the consumer's keyword arguments, not both ({cls.__name__})")
        return settings
    if group is None or namesrv_addrs is None:
        raise TypeError("a consumer needs its group and the name server addresses (or settings=)")
    return cls(group=group, namesrv_addrs=namesrv_addrs, **options)
