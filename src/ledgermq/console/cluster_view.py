"""What the cluster page shows, gathered through the admin client: every broker group with
its mode and roles, each broker's address, version, TPS, disk use and dispatch lag, and
its replication state (HA epoch and slave lag; DLedger term, indices and member lag; in
controller mode the master epoch and SyncStateSet).

Each broker is asked twice per look (runtime info, and its DLedger or HA status), all
brokers at once with a short timeout, so one broker that hangs costs a look that long and
no more. A broker the name server still lists but that does not answer is shown down with
the reason; a broker seen earlier that the name server no longer lists (a killed DLedger
leader, before its registration expires or after) stays on the page as down for
``FORGET_AFTER_S``, so a failover shows who left as well as who took over.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ledgermq.admin import controller_ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminResponseError, DLedgerStatus, HARuntimeInfo
from ledgermq.errors import LedgerError
from ledgermq.protocol.controller_body import ReplicasInfo

FORGET_AFTER_S = 300.0


def first_tps(text: str) -> float:
    """The 10-second figure of a runtime-info TPS triple ("1.0 0.5 0.2")."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return 0.0


@dataclass(slots=True)
class BrokerRow:
    group: str
    addr: str
    broker_id: int | None  # as the name server lists it now; None: no longer listed
    up: bool = False
    error: str = ""
    version: str = ""
    in_tps: float = 0.0
    out_tps: float = 0.0
    disk_ratio: float = -1.0
    dispatch_behind: int = 0
    max_offset: int = 0
    role: str = ""
    ha: HARuntimeInfo | None = None
    dledger: DLedgerStatus | None = None


@dataclass(slots=True)
class GroupView:
    cluster: str
    name: str
    mode: str  # "master-slave", "DLedger", "controller", or "unknown" while no member answers
    brokers: list[BrokerRow] = field(default_factory=list)
    leader: str = ""  # DLedger: the leader's id; else the master's address
    term: int = 0
    replicas: ReplicasInfo | None = None
    controller_error: str = ""


@dataclass(slots=True)
class ClusterView:
    namesrv: str
    groups: list[GroupView]
    taken_at_ms: int


class ClusterWatcher:
    """Keeps what must outlive one look: which brokers speak DLedger (asked once: a broker's
    mode does not change while it runs) and the brokers seen before."""

    def __init__(self, admin: AdminClient, controller_addrs: str | None, timeout_s: float) -> None:
        self.admin = admin
        self.controller_addrs = controller_addrs
        self.timeout_s = timeout_s
        self._dledger: dict[str, bool] = {}
        self._seen: dict[tuple[str, str], float] = {}  # (group, addr) -> when last listed

    async def look(self) -> ClusterView:
        info = await self.admin.cluster_info()
        now = time.monotonic()
        rows: list[BrokerRow] = []
        listed: set[tuple[str, str]] = set()
        for name, data in sorted(info.broker_addr_table.items()):
            for broker_id, addr in sorted(data.broker_addrs.items()):
                rows.append(BrokerRow(name, addr, broker_id))
                listed.add((name, addr))
                self._seen[(name, addr)] = now
        for (name, addr), last in sorted(self._seen.items()):
            if (name, addr) in listed:
                continue
            if now - last > FORGET_AFTER_S:
                del self._seen[(name, addr)]
            else:
                rows.append(BrokerRow(name, addr, None))
        await asyncio.gather(*(self._fill(row) for row in rows))
        groups: dict[str, GroupView] = {}
        for row in rows:
            group = groups.get(row.group)
            if group is None:
                cluster = info.cluster_of(row.group) or ""
                group = groups[row.group] = GroupView(cluster, row.group, "unknown")
            group.brokers.append(row)
        for group in groups.values():
            _settle(group)
        if self.controller_addrs and groups:
            await self._controller(list(groups.values()))
        ordered = sorted(groups.values(), key=lambda g: (g.cluster, g.name))
        return ClusterView(self.admin.namesrv_in_use or "", ordered, int(time.time() * 1000))

    async def _fill(self, row: BrokerRow) -> None:
        try:
            table = await asyncio.wait_for(self.admin.broker_runtime_info(row.addr), self.timeout_s)
        except (LedgerError, OSError, TimeoutError) as exc:
            row.error = str(exc) or type(exc).__name__
            return
        row.up = True
        row.version = table.get("brokerVersionDesc", "")
        row.in_tps = first_tps(table.get("putTps", ""))
        row.out_tps = first_tps(table.get("getTransferedTps", ""))
        row.disk_ratio = _float(table.get("commitLogDiskRatio"), -1.0)
        row.dispatch_behind = int(_float(table.get("dispatchBehindBytes"), 0))
        row.max_offset = int(_float(table.get("commitLogMaxOffset"), 0))
        try:
            if self._dledger.get(row.addr, True):
                try:
                    row.dledger = await asyncio.wait_for(self.admin.dledger_status(row.addr), self.timeout_s)
                    self._dledger[row.addr] = True
                    row.role = row.dledger.role
                    return
                except AdminResponseError:
                    self._dledger[row.addr] = False  # not a DLedger member: ask for HA from now on
            row.ha = await asyncio.wait_for(self.admin.ha_status(row.addr), self.timeout_s)
            row.role = "MASTER" if row.ha.master else "SLAVE"
        except (LedgerError, OSError, TimeoutError) as exc:
            row.error = f"replication status: {exc or type(exc).__name__}"

    async def _controller(self, groups: list[GroupView]) -> None:
        assert self.controller_addrs is not None
        try:
            info = await asyncio.wait_for(
                controller_ops.sync_state_sets(self.controller_addrs, [g.name for g in groups], self.timeout_s),
                2 * self.timeout_s,
            )
        except (LedgerError, OSError, TimeoutError, ValueError) as exc:
            for g in groups:
                g.controller_error = f"controller {self.controller_addrs}: {exc or type(exc).__name__}"
            return
        for g in groups:
            replicas = info.replicas_info_table.get(g.name)
            if replicas is not None:
                g.replicas = replicas
                if g.mode == "master-slave":
                    g.mode = "controller"


def _settle(group: GroupView) -> None:
    """The group's mode and leader from what its members said; members ordered for reading."""
    group.brokers.sort(key=lambda r: (r.broker_id is None, r.broker_id if r.broker_id is not None else 0, r.addr))
    dledger = [r.dledger for r in group.brokers if r.dledger is not None]
    if dledger:
        group.mode = "DLedger"
        leader = next((d for d in dledger if d.is_leader), None)
        group.leader = leader.self_id if leader is not None else ""
        group.term = max(d.term for d in dledger)
    elif any(r.ha is not None for r in group.brokers):
        group.mode = "master-slave"
        group.leader = next((r.addr for r in group.brokers if r.broker_id == 0 and r.up), "")


def _float(text: str | None, default: float) -> float:
    try:
        return float(text) if text not in (None, "") else default
    except ValueError:
        return default


__all__ = ["BrokerRow", "ClusterView", "ClusterWatcher", "GroupView"]
