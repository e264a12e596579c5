"""What the cluster page shows, gathered through the admin client: every broker group with
its mode and roles, each broker's address, version, TPS, disk use and dispatch lag, and
its replication state (HA epoch and slave lag; DLedger term, indices and member lag; in
controller mode the master epoch and SyncStateSet, from the controller found as
controller_view.py says) and its timers (pending, filed, how far delivery is behind).

Each broker is asked twice per look (runtime info, and its DLedger or HA status), all
brokers at once with a short timeout, so one broker that hangs costs a look that long and
no more. A broker the name server still lists but that does not answer is shown down with
the reason; a broker seen earlier that the name server no longer lists (a killed DLedger
leader, before its registration expires or after) stays on the page as down for
``FORGET_AFTER_S``, so a failover shows who left as well as who took over.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ledgermq.admin import controller_ops
from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminResponseError, DLedgerStatus, HARuntimeInfo
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.console.controller_view import NAMESRV_SOURCE, ControllerFacts, ControllerFinder, controller_facts
from ledgermq.errors import LedgerError
from ledgermq.protocol.controller_body import ReplicasInfo

FORGET_AFTER_S = 300.0


def first_tps(text: str) -> float:
    """The 10-second figure of a runtime-info TPS triple ("1.0 0.5 0.2")."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return 0.0


@dataclass(frozen=True, slots=True)
class TimerFacts:
    """A broker's timer messages (brokerStatus's timer keys; absent on a broker without timers)."""

    pending: int  # stored, not delivered yet (timerPending)
    unfiled: int  # stored, not filed into the wheel yet (timerOffsetBehind)
    read_behind_s: int  # how far behind now delivery is (timerReadBehind)
    delivered: int

    @classmethod
    def from_table(cls, table: dict[str, str]) -> TimerFacts | None:
        if "timerPending" not in table:
            return None
        return cls(
            pending=int(_float(table.get("timerPending"), 0)),
            unfiled=int(_float(table.get("timerOffsetBehind"), 0)),
            read_behind_s=int(_float(table.get("timerReadBehind"), 0)),
            delivered=int(_float(table.get("timerDelivered"), 0)),
        )


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
    controller: ControllerFacts | None = None
    timers: TimerFacts | None = None


@dataclass(slots=True)
class GroupView:
    cluster: str
    name: str
    mode: str  # "master-slave", "DLedger", "controller", or "unknown" while no member answers
    brokers: list[BrokerRow] = field(default_factory=list)
    leader: str = ""  # DLedger: the leader's id; else the master's address
    term: int = 0
    replicas: ReplicasInfo | None = None
    controller_addrs: str = ""  # the controller asked, and where its address came from
    controller_source: str = ""
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
        self.controllers = ControllerFinder(admin, controller_addrs, timeout_s)
        self.timeout_s = timeout_s
        self._dledger: dict[str, bool] = {}
        self._seen: dict[tuple[str, str], float] = {}  # (group, addr) -> when last listed

    async def look(self) -> ClusterView:
        info = await self.admin.cluster_info()
        now = SYSTEM_CLOCK.monotonic()
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
        # controller mode: the groups whose brokers say so, or every group when told --controller
        controlled = [g for g in groups.values() if g.mode == "controller" or self.controller_addrs]
        if controlled:
            await self._controller(controlled)
        ordered = sorted(groups.values(), key=lambda g: (g.cluster, g.name))
        return ClusterView(self.admin.namesrv_in_use or "", ordered, SYSTEM_CLOCK.wall_ms())

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
        row.controller = controller_facts(table)
        row.timers = TimerFacts.from_table(table)
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
            if row.controller is not None:  # STARTING and SWITCHING too: the controller's word
                row.role = row.controller.role
        except (LedgerError, OSError, TimeoutError) as exc:
            row.error = f"replication status: {exc or type(exc).__name__}"

    async def _controller(self, groups: list[GroupView]) -> None:
        brokers = [r.addr for g in groups for r in g.brokers if r.up and (r.controller is not None)]
        addrs, source = await self.controllers.addrs(brokers)
        try:
            info = await asyncio.wait_for(
                controller_ops.sync_state_sets(
                    addrs, [g.name for g in groups], self.timeout_s, client=self.admin.remoting
                ),
                2 * self.timeout_s,
            )
        except (LedgerError, OSError, TimeoutError, ValueError) as exc:
            why = f"controller {addrs} ({source}): {exc or type(exc).__name__}"
            if source == NAMESRV_SOURCE:
                why += "; if the controller runs outside the name servers, give --controller host:port"
            for g in groups:
                g.controller_error = why
            return
        for g in groups:
            g.controller_addrs, g.controller_source = addrs, source
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
    elif any(r.controller is not None for r in group.brokers):
        group.mode = "controller"
        group.leader = next((r.addr for r in group.brokers if r.up and r.role == "MASTER"), "")
    elif any(r.ha is not None for r in group.brokers):
        group.mode = "master-slave"
        group.leader = next((r.addr for r in group.brokers if r.broker_id == 0 and r.up), "")


def _float(text: str | None, default: float) -> float:
    try:
        return float(text) if text not in (None, "") else default
    except ValueError:
        return default


__all__ = ["BrokerRow", "ClusterView", "ClusterWatcher", "GroupView", "TimerFacts"]
