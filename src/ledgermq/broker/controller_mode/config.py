"""Controller-mode settings of a broker (RocketMQ 5's BrokerConfig / MessageStoreConfig keys).

With ``enableControllerMode=true`` a controller (``controllerAddr``) decides which replica
of a master-slave group is master; the broker applies for its id, heartbeats, and takes
the role it is given (``broker/controller_mode/``, docs/controller.md).

Defaults differ from RocketMQ 5's where its timing would make a failover take ~10 s:

* ``brokerHeartbeatInterval`` 200 ms (RocketMQ 1 s) and ``controllerHeartBeatTimeoutMills``
  1500 ms (RocketMQ 10 s). A broker process that dies is seen at once (its heartbeat
  connection closes); the timeout only decides for a broker that stays connected but
  silent (SIGSTOP, a hung loop, a partition). 1.5 s is seven missed heartbeats, well past a
  GC-free Python loop's worst stall on a loaded 2-core machine, so a busy master is not
  deposed by mistake.
* ``syncBrokerMetadataPeriod`` 1 s (RocketMQ 5 s): the poll of GET_REPLICA_INFO that catches
  a missed NOTIFY_BROKER_ROLE_CHANGED (a oneway request may be lost).
* ``checkSyncStateSetPeriod`` 500 ms (RocketMQ 5 s) and ``haMaxTimeSlaveNotCatchup`` 3 s
  (RocketMQ 15 s): a slave that stalls is dropped from the SyncStateSet within 3.5 s, before
  the sends waiting for it time out (syncFlushTimeout, 5 s), so they are released instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.config import key
from ledgermq.controller.client import parse_controller_addrs
from ledgermq.errors import ConfigError

__all__ = ["ControllerModeConfig", "check_roles_in_file"]

JAVA_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ControllerModeConfig:
    enable: bool = key("enableControllerMode", False)
    controller_addr: str = key("controllerAddr", "")
    """';'-separated controller addresses: controller nodes' Raft addresses, or name servers
    that run the controller inside (enableControllerInNamesrv)."""
    heartbeat_interval_ms: int = key("brokerHeartbeatInterval", 200)
    heartbeat_timeout_ms: int = key("controllerHeartBeatTimeoutMills", 1500)
    sync_broker_metadata_period_ms: int = key("syncBrokerMetadataPeriod", 1000)
    check_sync_state_set_period_ms: int = key("checkSyncStateSetPeriod", 500)
    ha_max_time_slave_not_catchup_ms: int = key("haMaxTimeSlaveNotCatchup", 3000)
    all_ack_in_sync_state_set: bool = key("allAckInSyncStateSet", False)
    min_in_sync_replicas: int = key("minInSyncReplicas", 1)
    election_priority: int = key("brokerElectionPriority", JAVA_INT_MAX)
    """Lower wins among equally caught-up candidates (RocketMQ's brokerElectionPriority)."""

    def __post_init__(self) -> None:
        if self.enable:
            try:
                parse_controller_addrs(self.controller_addr)
            except ValueError:
                raise ConfigError("enableControllerMode=true needs controllerAddr (host:port;host:port)") from None
        for name, value in (
            ("brokerHeartbeatInterval", self.heartbeat_interval_ms),
            ("controllerHeartBeatTimeoutMills", self.heartbeat_timeout_ms),
            ("syncBrokerMetadataPeriod", self.sync_broker_metadata_period_ms),
            ("checkSyncStateSetPeriod", self.check_sync_state_set_period_ms),
            ("haMaxTimeSlaveNotCatchup", self.ha_max_time_slave_not_catchup_ms),
        ):
            if value <= 0:
                raise ConfigError(f"{name} must be a positive number of milliseconds")
        if self.heartbeat_timeout_ms < 3 * self.heartbeat_interval_ms:
            raise ConfigError(
                "controllerHeartBeatTimeoutMills must be at least 3 times brokerHeartbeatInterval "
                "(else one late heartbeat deposes a healthy master)"
            )
        if self.min_in_sync_replicas < 1:
            raise ConfigError("minInSyncReplicas must be at least 1 (the master counts)")

    @property
    def controller_addrs(self) -> list[str]:
        return parse_controller_addrs(self.controller_addr)


def check_roles_in_file(props: Mapping[str, str], cfg: ControllerModeConfig) -> list[str]:
    """What ``brokerId`` / ``brokerRole`` in a controller-mode file mean; ConfigError for a
    contradiction, else warnings to log (nothing is ignored silently).

    The controller decides master and slave, and hands out broker ids (RocketMQ ignores
    brokerId in controller mode). brokerRole=SLAVE contradicts that and is refused.
    brokerRole names how a master acknowledges when allAckInSyncStateSet is off:
    SYNC_MASTER waits for one slave (as in master-slave mode), ASYNC_MASTER (the default)
    waits for none; with allAckInSyncStateSet=true the SyncStateSet decides, so
    ASYNC_MASTER is refused as a contradiction."""
    if props.get("enableDLegerCommitLog", "").strip().lower() == "true":
        raise ConfigError("enableControllerMode and enableDLegerCommitLog exclude each other: choose one")
    warnings: list[str] = []
    role = props.get("brokerRole", "").strip()
    if role == "SLAVE":
        raise ConfigError(
            "brokerRole=SLAVE with enableControllerMode=true: the controller decides which replica is a "
            "slave; remove brokerRole (or set SYNC_MASTER / ASYNC_MASTER for how a master acknowledges)"
        )
    if role == "ASYNC_MASTER" and cfg.all_ack_in_sync_state_set:
        raise ConfigError(
            "brokerRole=ASYNC_MASTER with allAckInSyncStateSet=true: a master either waits for every "
            "SyncStateSet member or for none; remove one of them"
        )
    if "brokerId" in props:
        warnings.append(
            f"brokerId={props['brokerId'].strip()} is ignored in controller mode: the controller assigns this "
            "broker's id (kept in <storePathRootDir>/brokerIdentity); it registers as 0 while it is master"
        )
    if "haMasterAddress" in props:
        warnings.append("haMasterAddress is ignored in controller mode: slaves follow the master the controller names")
    return warnings
