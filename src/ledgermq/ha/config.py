"""HA settings under RocketMQ ``MessageStoreConfig`` key names (defaults as in 4.9.7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledgermq.config import config_from_properties, key
from ledgermq.errors import ConfigError
from ledgermq.ha.codec import MAX_FRAME_BODY

ROLE_DEFAULT = -2  # haRecoveryWaitMillis left unset
ASYNC_RECOVERY_WAIT_MS = 3000

# 4.9.7 has no haMaxGapNotInSync (a 5.x name); haSlaveFallbehindMax is its equivalent.
FALLBEHIND_ALIAS = "haMaxGapNotInSync"


@dataclass(frozen=True, slots=True)
class HAConfig:
    # 0 means "the broker's listenPort + 1" (see ``resolve_listen_port``).
    listen_port: int = key("haListenPort", 0)
    send_heartbeat_interval_ms: int = key("haSendHeartbeatInterval", 5000)
    housekeeping_interval_ms: int = key("haHousekeepingInterval", 20000)
    transfer_batch_size: int = key("haTransferBatchSize", 32 * 1024)
    master_address: str = key("haMasterAddress", "")
    slave_fallbehind_max: int = key("haSlaveFallbehindMax", 256 * 1024 * 1024)
    # ledgermq's own: how long a master that restarted after a crash waits for its slave to
    # return what it may have lost before taking writes (ha/epochs.py). -1: until a slave
    # comes; 0: not at all; unset: -1 for SYNC_MASTER, 3000 for ASYNC_MASTER.
    recovery_wait_millis: int = key("haRecoveryWaitMillis", ROLE_DEFAULT)

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"haListenPort={self.listen_port}: not a port")
        if self.send_heartbeat_interval_ms <= 0:
            raise ConfigError("haSendHeartbeatInterval must be positive")
        if self.housekeeping_interval_ms <= 0:
            raise ConfigError("haHousekeepingInterval must be positive")
        if not 0 < self.transfer_batch_size <= MAX_FRAME_BODY:
            raise ConfigError(f"haTransferBatchSize must be within 1..{MAX_FRAME_BODY}")
        if self.slave_fallbehind_max <= 0:
            raise ConfigError("haSlaveFallbehindMax must be positive")
        if self.recovery_wait_millis < -1 and self.recovery_wait_millis != ROLE_DEFAULT:
            raise ConfigError("haRecoveryWaitMillis must be -1 (wait for a slave), 0 (do not wait) or positive")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: Any) -> HAConfig:
        """Read the RocketMQ keys; ``haMaxGapNotInSync`` is accepted for haSlaveFallbehindMax."""
        if FALLBEHIND_ALIAS in props and "haSlaveFallbehindMax" not in props:
            props = {**props, "haSlaveFallbehindMax": props[FALLBEHIND_ALIAS]}
        try:
            return config_from_properties(cls, props, **overrides)
        except ConfigError as exc:
            if FALLBEHIND_ALIAS in props and "haSlaveFallbehindMax" in str(exc):
                raise ConfigError(str(exc).replace("haSlaveFallbehindMax", FALLBEHIND_ALIAS)) from exc
            raise

    def recovery_wait_ms(self, sync_master: bool) -> int:
        if self.recovery_wait_millis != ROLE_DEFAULT:
            return self.recovery_wait_millis
        return -1 if sync_master else ASYNC_RECOVERY_WAIT_MS

    def resolve_listen_port(self, listen_port: int) -> int:
        return self.listen_port or listen_port + 1

    @property
    def heartbeat_interval_s(self) -> float:
        return self.send_heartbeat_interval_ms / 1000

    @property
    def housekeeping_interval_s(self) -> float:
        return self.housekeeping_interval_ms / 1000
