"""What the admin client returns and raises: result dataclasses, their decoders, errors and
small helpers shared by ``AdminClient`` and ``ledgermq admin``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledgermq.client.errors import MQBrokerError, MQClientError, MQConnectError
from ledgermq.client.instance.namesrv import split_namesrv_addrs as split_namesrv_addrs
from ledgermq.net.client import split_address
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import BrokerData

DEFAULT_TIMEOUT = 5.0  # DefaultMQAdminExt's timeoutMillis
AUTO_CREATE_TOPIC = "TBW102"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
MAX_LONG = 2**63 - 1
DEFAULT_QUERY_MAX_NUM = 64  # what mqadmin queryMsgByKey asks for


# -- errors ------------------------------------------------------------------------------
# Admin errors are client errors: one hierarchy for everything a client-side call can
# fail with, so a caller that catches MQClientError (or MQConnectError, MQBrokerError)
# catches the admin tools' failures too.
class AdminError(MQClientError):
    """An admin request could not be carried out."""


class AdminConnectError(MQConnectError, AdminError):
    """No server could be reached, or it did not answer in time."""


class AdminResponseError(MQBrokerError, AdminError):
    """The server answered with an error code."""

    def __init__(self, code: int, remark: str | None, what: str = "") -> None:
        super().__init__(code, remark, what=what)


def mq_version_desc(ordinal: int) -> str:
    """``MQVersion.getVersionDesc``: 407 -> "V4_9_7", 406 -> "V4_9_7_SNAPSHOT".

    From V4_0_0_SNAPSHOT (212) on the enum is regular: each x_y_z has a SNAPSHOT then a
    release, z and y running 0..9; HIGHER_VERSION (612) ends it."""
    if ordinal >= 612:
        return "HIGHER_VERSION"
    if ordinal < 212:
        return f"V3({ordinal})"
    step, release = divmod(ordinal - 212, 2)
    name = f"V{4 + step // 100}_{step // 10 % 10}_{step % 10}"
    return name if release else name + "_SNAPSHOT"


# -- answers -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: broker groups by name, and broker names by cluster."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def broker_names(self, cluster: str) -> list[str]:
        if cluster not in self.cluster_addr_table:
            known = ", ".join(sorted(self.cluster_addr_table)) or "none"
            raise AdminError(f"cluster {cluster!r} is not known to the name server (clusters: {known})")
        return sorted(self.cluster_addr_table[cluster])

    def master_addrs(self, cluster: str) -> list[str]:
        """The master address of every broker group of ``cluster`` that has one."""
        addrs: list[str] = []
        for name in self.broker_names(cluster):
            data = self.broker_addr_table.get(name)
            addr = data.master_addr() if data is not None else None
            if addr:
                addrs.append(addr)
        return addrs

    def all_addrs(self, cluster: str) -> list[str]:
        """Masters and slaves of ``cluster``, by broker name then id."""
        addrs: list[str] = []
        for name in self.broker_names(cluster):
            data = self.broker_addr_table.get(name)
            if data is not None:
                addrs.extend(addr for _, addr in sorted(data.broker_addrs.items()))
        return addrs

    def cluster_of(self, broker_name: str) -> str | None:
        for cluster, names in sorted(self.cluster_addr_table.items()):
            if broker_name in names:
                return cluster
        return None

    def broker_name_of(self, addr: str) -> str | None:
        for name, data in sorted(self.broker_addr_table.items()):
            if addr in data.broker_addrs.values():
                return name
        return None


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue of GET_TOPIC_STATS_INFO."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue of GET_CONSUME_STATS."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(slots=True)
class ConsumeStats:
    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    @property
    def total_diff(self) -> int:
        return sum(w.diff for w in self.offset_table.values())


@dataclass(frozen=True, slots=True)
class ClientConnection:
    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST: the live clients of a group and how they consume."""

    connections: list[ClientConnection] = field(default_factory=list)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def min_version(self) -> int:
        return min((c.version for c in self.connections), default=0)


@dataclass(slots=True)
class GroupConsumeInfo:
    """One line of ``consumerProgress`` without a group."""

    group: str
    count: int = 0
    version: int = 0
    consume_type: str = ""
    message_model: str = ""
    consume_tps: float = 0.0
    diff_total: int = 0


@dataclass(slots=True)
class QueryResult:
    index_last_update_timestamp: int = 0
    messages: list[MessageRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HAConnectionInfo:
    """One slave as its master sees it (HAConnectionRuntimeInfo, plus our fields)."""

    addr: str
    slave_ack_offset: int  # -1 before the slave's first report
    diff: int  # master max offset - acknowledged offset, in bytes
    in_sync: bool
    transferred_byte_in_second: int = 0
    transfer_from_where: int = -1
    connected: bool = True  # False: a connection that went away (a Java master lists live ones only)
    last_ack_timestamp: int = 0  # wall ms of the latest report, 0 if none
    lag_time_ms: int = -1  # age of the oldest unacknowledged message; 0 caught up, -1 unknown
    closed_reason: str = ""

    def since_last_ack_ms(self, now_ms: int) -> int:
        """Milliseconds since the slave's latest report (-1 if it never reported)."""
        return max(0, now_ms - self.last_ack_timestamp) if self.last_ack_timestamp > 0 else -1


@dataclass(frozen=True, slots=True)
class HAClientInfo:
    """A slave's replication client (HAClientRuntimeInfo, plus our fields)."""

    master_addr: str = ""
    max_offset: int = 0
    last_read_timestamp: int = 0
    last_write_timestamp: int = 0
    transferred_byte_in_second: int = 0
    master_flush_offset: int = 0
    connected: bool = False
    reported_offset: int = -1
    connects: int = 0
    last_error: str = ""
    epoch: int = 0  # ledgermq: the epoch of the slave's last byte
    truncations: int = 0  # ledgermq: tails cut on the master's word
    truncated_bytes: int = 0
    refused: str = ""  # ledgermq: why the master refuses this slave


@dataclass(frozen=True, slots=True)
class HARuntimeInfo:
    """GET_BROKER_HA_STATUS: a master's slaves, or a slave's view of its master."""

    master: bool
    master_commit_log_max_offset: int = 0
    in_sync_slave_nums: int = 0
    connections: list[HAConnectionInfo] = field(default_factory=list)
    client: HAClientInfo = field(default_factory=HAClientInfo)
    epoch: int = 0  # ledgermq: the master's replication epoch
    recovering: bool = False  # ledgermq: refusing writes until a slave returns a lost tail
    write_fence: str = ""
    recovery_note: str = ""
    truncated_slaves: int = 0
    took_back_bytes: int = 0
    # ledgermq: damaged commit-log ranges and their repair from a replica (master and slave)
    damaged_ranges: list[tuple[int, int]] = field(default_factory=list)
    unrepaired: list[str] = field(default_factory=list)  # "no replica holds [a, b): why"
    repairs_taken: int = 0
    repair_bytes_taken: int = 0
    repairs_given: int = 0
    repair_bytes_given: int = 0
    repairs_expired: int = 0  # damaged ranges a slave let go: its master's retention had deleted them
    repair_bytes_expired: int = 0
    last_repair: str = ""


def _int(doc: dict[str, Any], key: str, default: int = 0) -> int:
    value = doc.get(key)
    return default if value is None else int(value)


def _bool(doc: dict[str, Any], key: str, default: bool = False) -> bool:
    value = doc.get(key)
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return default if value is None else bool(value)


def decode_ha_runtime_info(doc: dict[str, Any]) -> HARuntimeInfo:
    """HARuntimeInfo from its JSON (a Java 5.x broker's or ours); TypeError/ValueError if malformed."""
    connections = [
        HAConnectionInfo(
            addr=str(c.get("addr") or ""),
            slave_ack_offset=_int(c, "slaveAckOffset", -1),
            diff=_int(c, "diff"),
            in_sync=_bool(c, "inSync"),
            transferred_byte_in_second=_int(c, "transferredByteInSecond"),
            transfer_from_where=_int(c, "transferFromWhere", -1),
            connected=_bool(c, "connected", True),
            last_ack_timestamp=_int(c, "lastAckTimestamp"),
            lag_time_ms=_int(c, "lagTimeMillis", -1),
            closed_reason=str(c.get("closedReason") or ""),
        )
        for c in doc.get("haConnectionInfo") or []
    ]
    ci = doc.get("haClientRuntimeInfo") or {}
    if not isinstance(ci, dict):
        raise TypeError("haClientRuntimeInfo is not an object")
    client = HAClientInfo(
        master_addr=str(ci.get("masterAddr") or ""),
        max_offset=_int(ci, "maxOffset"),
        last_read_timestamp=_int(ci, "lastReadTimestamp"),
        last_write_timestamp=_int(ci, "lastWriteTimestamp"),
        transferred_byte_in_second=_int(ci, "transferredByteInSecond"),
        master_flush_offset=_int(ci, "masterFlushOffset"),
        connected=_bool(ci, "connected", _bool(ci, "isActivated")),
        reported_offset=_int(ci, "reportedOffset", -1),
        connects=_int(ci, "connects"),
        last_error=str(ci.get("lastError") or ""),
        epoch=_int(ci, "epoch"),
        truncations=_int(ci, "truncations"),
        truncated_bytes=_int(ci, "truncatedBytes"),
        refused=str(ci.get("refused") or ""),
    )
    return HARuntimeInfo(
        master=_bool(doc, "master"),
        master_commit_log_max_offset=_int(doc, "masterCommitLogMaxOffset"),
        in_sync_slave_nums=_int(doc, "inSyncSlaveNums"),
        connections=connections,
        client=client,
        epoch=_int(doc, "epoch"),
        recovering=_bool(doc, "recovering"),
        write_fence=str(doc.get("writeFence") or ""),
        recovery_note=str(doc.get("recoveryNote") or ""),
        truncated_slaves=_int(doc, "truncatedSlaves"),
        took_back_bytes=_int(doc, "tookBackBytes"),
        damaged_ranges=[(int(r[0]), int(r[1])) for r in doc.get("damagedRanges") or []],
        unrepaired=[str(u) for u in doc.get("unrepaired") or []],
        repairs_taken=_int(doc, "repairsTaken"),
        repair_bytes_taken=_int(doc, "repairBytesTaken"),
        repairs_given=_int(doc, "repairsGiven"),
        repair_bytes_given=_int(doc, "repairBytesGiven"),
        repairs_expired=_int(doc, "repairsExpired"),
        repair_bytes_expired=_int(doc, "repairBytesExpired"),
        last_repair=str(doc.get("lastRepair") or ""),
    )


def select_broker_addr(data: BrokerData) -> str | None:
    """``BrokerData.selectBrokerAddr``: the master, else a slave (the lowest id here)."""
    master = data.master_addr()
    if master:
        return master
    return next((addr for _, addr in sorted(data.broker_addrs.items())), None)


def msg_id(record: MessageRecord) -> str:
    """What RocketMQ clients call a message's msgId: UNIQ_KEY, else the offset id."""
    return record.properties.get(P.UNIQ_KEY) or record.offset_msg_id


def normalize_address(addr: str) -> str:
    """``host:port`` checked (port 1..65535); ``[v6]:port`` becomes ``v6:port``; AdminError if unusable."""
    addr = addr.strip()
    try:
        host, port = split_address(addr)
    except ValueError as exc:
        raise AdminError(str(exc)) from None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not 0 < port < 65536:
        raise AdminError(f"address {addr!r} is not host:port (port 1..65535)")
    return f"{host}:{port}"


# -- the client --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DLedgerMember:
    """The leader's view of one member of its group: how far its log matches the leader's."""

    id: str
    match_index: int
    lag: int  # leader's last index - match index (0: caught up)
    stuck: bool = False  # it needs entries the leader's retention deleted: it cannot catch up


@dataclass(frozen=True, slots=True)
class DLedgerStatus:
    """GET_DLEDGER_STATUS (ledgermq-only): one DLedger-mode broker's Raft state."""

    group: str
    self_id: str
    role: str  # LEADER, FOLLOWER, CANDIDATE, ...
    term: int
    leader: str  # "" while unknown
    commit_index: int
    applied_index: int
    last_index: int
    persisted_index: int
    broker_name: str = ""
    broker_id: int = -1
    peers: dict[str, str] = field(default_factory=dict)
    members: list[DLedgerMember] = field(default_factory=list)  # on the leader only
    failed: str = ""
    first_index: int = 1  # the first raft index this member still stores (retention moves it)
    state: str = ""  # "running", or "failed" while a fail-stopped driver is being restarted
    driver_failures: int = 0
    repairs: int = 0
    """Times this member's log was found damaged and a repair from the leader began."""
    repairs_completed: int = 0
    repairing_until: int = 0
    """While repairing: the index its log must reach again (0: not repairing)."""

    @property
    def is_leader(self) -> bool:
        return self.role == "LEADER"


def decode_dledger_status(doc: dict[str, Any]) -> DLedgerStatus:
    """DLedgerStatus from its JSON; TypeError/ValueError/AttributeError if malformed."""
    return DLedgerStatus(
        group=str(doc.get("group") or ""),
        self_id=str(doc.get("selfId") or ""),
        role=str(doc.get("role") or ""),
        term=_int(doc, "term"),
        leader=str(doc.get("leader") or ""),
        commit_index=_int(doc, "commitIndex"),
        applied_index=_int(doc, "appliedIndex"),
        last_index=_int(doc, "lastIndex"),
        persisted_index=_int(doc, "persistedIndex"),
        broker_name=str(doc.get("brokerName") or ""),
        broker_id=_int(doc, "brokerId", -1),
        peers={str(k): str(v) for k, v in (doc.get("peers") or {}).items()},
        members=[
            DLedgerMember(str(m["id"]), _int(m, "matchIndex"), _int(m, "lag"), bool(m.get("stuck")))
            for m in doc.get("members") or []
        ],
        failed=str(doc.get("failed") or ""),
        first_index=_int(doc, "firstIndex", 1),
        state=str(doc.get("state") or ""),
        driver_failures=_int(doc, "driverFailures"),
        repairs=_int(doc, "repairs"),
        repairs_completed=_int(doc, "repairsCompleted"),
        repairing_until=_int(doc, "repairingUntil"),
    )
