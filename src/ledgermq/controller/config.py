"""The controller's settings, read from RocketMQ 5's controller keys (ControllerConfig).

The same keys serve a controller inside a name server (``enableControllerInNamesrv=true``
in the name server's file) and a standalone one (``ledgermq controller -c FILE``). A
malformed or inconsistent value stops start-up with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ledgermq.config import key
from ledgermq.errors import ConfigError
from ledgermq.raftio.transport import parse_peers

__all__ = ["ControllerConfig"]


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    group: str = key("controllerDLegerGroup", "")
    peers: str = key("controllerDLegerPeers", "")
    """``n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858``: each node's Raft address, on
    which it also answers controller requests (as RocketMQ 5's DLedger controller does)."""
    self_id: str = key("controllerDLegerSelfId", "")
    store_path: str = key("controllerStorePath", str(Path.home() / "DledgerController"))
    enable_elect_unclean_master: bool = key("enableElectUncleanMaster", False)
    notify_broker_role_changed: bool = key("notifyBrokerRoleChanged", True)
    scan_not_active_broker_interval_ms: int = key("scanNotActiveBrokerInterval", 5000)
    """How often the leader looks for brokers whose heartbeat timed out."""
    scan_inactive_master_interval_ms: int = key("scanInactiveMasterInterval", 5000)
    """How often the leader looks for groups whose master is gone and elects (a lost master
    also triggers an election at once; this catches what a failed attempt left)."""
    elect_master_max_retry_count: int = key("electMasterMaxRetryCount", 3)
    heartbeat_timeout_ms: int = key("controllerHeartBeatTimeoutMills", 10_000)
    """When a heartbeat carries no heartbeatTimeoutMills (RocketMQ brokers send their
    controllerHeartBeatTimeoutMills in every heartbeat), the broker counts as gone after this."""
    mapped_file_size: int = key("mappedFileSize", 64 * 1024 * 1024)
    """Size of the Raft log's data files (RocketMQ's default is 1 GiB; controller logs are small)."""
    raft_heartbeat_interval_ms: int = key("controllerDLegerHeartBeatIntervalMs", 100)
    """ledgermq's own: the Raft tick (a leader heartbeat per tick)."""
    raft_election_timeout_ms: int = key("controllerDLegerElectionTimeoutMs", 1000)
    """ledgermq's own: the base election timeout (a follower campaigns after [T, 2T) of silence)."""
    listen_port: int = key("listenPort", 0)
    """Standalone only: a second port answering controller requests; 0 answers on the Raft
    address alone. Inside a name server the name server's own port answers them."""

    def __post_init__(self) -> None:
        if not self.group.strip():
            raise ConfigError("controllerDLegerGroup must be set (e.g. controllerDLegerGroup=group1)")
        if not self.peers.strip():
            raise ConfigError("controllerDLegerPeers must be set (e.g. n0-127.0.0.1:9878;n1-127.0.0.1:9868)")
        try:
            peers = parse_peers(self.peers)
        except ConfigError as exc:
            raise ConfigError(f"controllerDLegerPeers: {exc}") from None
        if self.self_id not in peers:
            raise ConfigError(
                f"controllerDLegerSelfId {self.self_id!r} is not in controllerDLegerPeers ({', '.join(peers)})"
            )
        positive = {
            "scanNotActiveBrokerInterval": self.scan_not_active_broker_interval_ms,
            "scanInactiveMasterInterval": self.scan_inactive_master_interval_ms,
            "controllerHeartBeatTimeoutMills": self.heartbeat_timeout_ms,
            "controllerDLegerHeartBeatIntervalMs": self.raft_heartbeat_interval_ms,
            "electMasterMaxRetryCount": self.elect_master_max_retry_count,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name} must be positive, not {value}")
        if self.raft_election_timeout_ms < 3 * self.raft_heartbeat_interval_ms:
            raise ConfigError(
                "controllerDLegerElectionTimeoutMs must be at least 3 times controllerDLegerHeartBeatIntervalMs"
            )
        if self.mapped_file_size < 1 << 20:
            raise ConfigError("mappedFileSize must be at least 1 MiB")
        if not 0 <= self.listen_port < 65536:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")

    @property
    def peer_addresses(self) -> dict[str, str]:
        return parse_peers(self.peers)

    @property
    def self_address(self) -> str:
        return self.peer_addresses[self.self_id]

    @property
    def election_ticks(self) -> int:
        return max(3, round(self.raft_election_timeout_ms / self.raft_heartbeat_interval_ms))

    def properties(self) -> dict[str, str]:
        """Every key with its value, as GET_CONTROLLER_CONFIG shows them."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.metadata["key"]] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
