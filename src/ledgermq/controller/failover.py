"""What the leader does with heartbeats: mark replicas alive or gone, elect, tell the brokers.

Every node keeps its own ``Liveness`` table from the heartbeats it receives (brokers send
them to every controller node). Only the ready leader acts on it, and only on transitions:

* a heartbeat from a registered replica the state does not count as alive -> BROKER_HEARTBEAT;
* a replica the state counts as alive whose heartbeats stopped for its timeout, or whose
  heartbeat connection closed -> BROKER_INACTIVE; if it was the master, an election at once;
* every ``scanInactiveMasterInterval``, groups whose master is not alive, or that have no
  master but an electable replica -> an election (catches what a failed attempt left).

A new leader gives every replica the state counts as alive one heartbeat timeout from its
election before declaring it gone, since it may have started after the broker's last
heartbeat. An election (``brokerId`` -1, candidates from this table) that succeeds is
told to each alive replica of the group by NOTIFY_BROKER_ROLE_CHANGED (oneway) when
``notifyBrokerRoleChanged`` is on.

Both scans are ``Periodic`` loops: a round that fails is logged and the next one runs.
"""

from __future__ import annotations

import asyncio
import logging

from ledgermq.aio.periodic import Periodic
from ledgermq.controller.events import BrokerHeartbeat, BrokerInactive, ElectMaster
from ledgermq.controller.liveness import BrokerKey, Liveness
from ledgermq.controller.model import Result
from ledgermq.controller.node import ControllerNode, NotLeaderNow, ProposalFailed
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet
from ledgermq.protocol.headers_controller import NotifyBrokerRoleChangedRequestHeader

__all__ = ["Failover"]

log = logging.getLogger(__name__)


class Failover:
    def __init__(self, node: ControllerNode, client: RemotingClient | None = None) -> None:
        self.node = node
        cfg = node.config
        self.liveness = Liveness(cfg.heartbeat_timeout_ms)
        self.client = client if client is not None else RemotingClient(connect_timeout=1.0)
        self._own_client = client is None
        self._inflight: set[tuple[str, BrokerKey]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.notifications_sent = 0
        self.notify_failures = 0
        self.elections = 0
        self._broker_scan = Periodic(
            "controller-broker-scan", self.scan_brokers, cfg.scan_not_active_broker_interval_ms / 1000
        )
        self._master_scan = Periodic(
            "controller-master-scan", self.scan_masters, cfg.scan_inactive_master_interval_ms / 1000
        )
        node.role_listeners.append(self._on_leadership)

    def start(self) -> None:
        self._broker_scan.start()
        self._master_scan.start()

    async def stop(self) -> None:
        await self._broker_scan.stop()
        await self._master_scan.stop()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self._own_client:
            await self.client.close()

    def now_ms(self) -> int:
        return self.node.clock.wall_ms()

    # -- inputs ------------------------------------------------------------------------
    def on_heartbeat(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        address: str,
        *,
        timeout_ms: int | None,
        epoch: int | None,
        max_offset: int | None,
        confirm_offset: int | None,
        election_priority: int | None,
        connection: object | None,
    ) -> None:
        self.liveness.heartbeat(
            self.now_ms(),
            cluster_name,
            broker_name,
            broker_id,
            address,
            timeout_ms=timeout_ms,
            epoch=epoch,
            max_offset=max_offset,
            confirm_offset=confirm_offset,
            election_priority=election_priority,
            connection=connection,
        )
        if not self.node.is_ready_leader:
            return
        g = self.node.state.groups.get(broker_name)
        r = g.replicas.get(broker_id) if g is not None else None
        if r is not None and not r.alive:
            self._spawn(("alive", (broker_name, broker_id)), self._mark_alive(broker_name, broker_id))

    def on_connection_closed(self, connection: object) -> None:
        gone = self.liveness.connection_closed(connection)
        for info in gone:
            log.info(
                "controller: heartbeat connection of %s/%d (%s) closed", info.broker_name, info.broker_id, info.address
            )
        if gone and self.node.is_ready_leader:
            self._spawn(("scan", ("", 0)), self.scan_brokers())

    def _on_leadership(self, ready: bool) -> None:
        if ready:
            # Catch up at once: replicas heard from meanwhile, masters lost under the old leader.
            self._spawn(("scan", ("", 0)), self.scan_brokers())
            self._spawn(("masters", ("", 0)), self.scan_masters())

    # -- scans -------------------------------------------------------------------------
    async def scan_brokers(self) -> None:
        """Mark alive what is heard from and gone what timed out (leader only; others just
        expire), then elect where a master went. Every replica found gone is marked so
        before any election: a master and its slave lost together (both SIGKILLed within a
        heartbeat timeout, found by one scan) must not see the slave elected only because
        the master was marked first, which shrank the SyncStateSet to a dead slave and left
        the master unelectable when it alone came back."""
        now = self.now_ms()
        self.liveness.expire(now)
        if not self.node.is_ready_leader:
            return
        grace_until = self.node.leader_since_ms + self.liveness.default_timeout_ms
        gone: list[BrokerKey] = []
        for g in list(self.node.state.groups.values()):
            for r in list(g.replicas.values()):
                key = (g.broker_name, r.broker_id)
                heard = self.liveness.is_alive(g.broker_name, r.broker_id, now)
                if heard and not r.alive:
                    await self._mark_alive(*key)
                elif r.alive and not heard and self.liveness.info(*key) is None and now <= grace_until:
                    continue  # a new leader has not had a full timeout to hear from it yet
                elif r.alive and not heard:
                    gone.append(key)
        masters_lost = [key[0] for key in gone if await self._mark_gone(*key)]
        for broker_name in dict.fromkeys(masters_lost):
            await self.trigger_election(broker_name)

    async def scan_masters(self) -> None:
        """Elect where the master is gone, or missing while a replica could take over."""
        if not self.node.is_ready_leader:
            return
        unclean = self.node.config.enable_elect_unclean_master
        for g in list(self.node.state.groups.values()):
            alive = g.alive_ids()
            master_lost = g.master_broker_id is not None and g.master_broker_id not in alive
            electable = alive if unclean else alive & g.sync_state_set
            headless = g.master_broker_id is None and g.elected_once and bool(electable)
            if (master_lost and alive) or headless:
                await self.trigger_election(g.broker_name)

    async def _mark_alive(self, broker_name: str, broker_id: int) -> None:
        await self._propose_quietly(BrokerHeartbeat(broker_name, broker_id, self.now_ms()))

    async def _mark_gone(self, broker_name: str, broker_id: int) -> bool:
        """Whether the replica marked gone was its group's master (an election is due)."""
        log.warning("controller: broker %s/%d is not active", broker_name, broker_id)
        result = await self._propose_quietly(BrokerInactive(broker_name, broker_id, self.now_ms()))
        return result is not None and result.changed and result.was_master

    async def _propose_quietly(self, event: BrokerHeartbeat | BrokerInactive | ElectMaster) -> Result | None:
        try:
            return await self.node.propose(event)
        except NotLeaderNow:
            return None  # leadership moved; the next leader's scan takes over
        except ProposalFailed as exc:
            log.warning("controller: %s", exc)
            return None

    # -- elections ---------------------------------------------------------------------
    async def trigger_election(self, broker_name: str) -> Result | None:
        """Elect a master for ``broker_name`` (electMasterMaxRetryCount tries); notify on success."""
        result: Result | None = None
        for _attempt in range(self.node.config.elect_master_max_retry_count):
            event = ElectMaster(
                broker_name,
                -1,
                False,
                self.node.config.enable_elect_unclean_master,
                self.liveness.candidates(broker_name, self.now_ms()),
                self.now_ms(),
            )
            result = await self._propose_quietly(event)
            if result is None and not self.node.is_ready_leader:
                return None
            if result is not None:
                break
        if result is None:
            return None
        self.elections += result.ok
        if result.ok:
            log.warning(
                "controller: broker-set %s elected master %s (%s), master epoch %s",
                broker_name,
                result.master_broker_id,
                result.master_address,
                result.master_epoch,
            )
            self.notify_role_changed(broker_name, result)
        elif result.code is not ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
            log.warning("controller: no master elected for broker-set %s: %s", broker_name, result.remark)
        return result

    def notify_role_changed(self, broker_name: str, result: Result) -> None:
        """Tell every alive replica of the group its new master (NOTIFY_BROKER_ROLE_CHANGED, oneway)."""
        if not self.node.config.notify_broker_role_changed or result.member_addrs is None:
            return
        g = self.node.state.groups.get(broker_name)
        alive = g.alive_ids() if g is not None else set()
        header = NotifyBrokerRoleChangedRequestHeader(
            result.master_address, result.master_epoch, result.sync_state_set_epoch, result.master_broker_id
        )
        body = SyncStateSet(result.sync_state_set or frozenset(), result.sync_state_set_epoch or 0).encode()
        for broker_id, addr in sorted(result.member_addrs.items()):
            if broker_id in alive and addr:
                cmd = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header.ext(), body, oneway=True)
                self._spawn(("notify", (addr, broker_id)), self._notify(addr, cmd))

    async def _notify(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            await self.client.invoke_oneway(addr, cmd)
            self.notifications_sent += 1
        except Exception as exc:
            self.notify_failures += 1
            log.warning("controller: could not tell broker %s its role changed: %s", addr, exc)

    def _spawn(self, key: tuple[str, BrokerKey], work: object) -> None:
        """Run ``work`` (a coroutine) once per key at a time; errors are logged, never lost."""
        assert asyncio.iscoroutine(work)
        if key in self._inflight:
            work.close()
            return
        self._inflight.add(key)

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("controller: %s failed", key[0])
            finally:
                self._inflight.discard(key)

        task = asyncio.create_task(run(), name=f"controller-{key[0]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
