"""BrokerApp: build the store, managers and processors, start and stop them in order.

Start: store (recovery) -> metadata managers -> remoting server -> registration.
Stop: unregister -> server -> persist offsets/metadata -> store (clean shutdown).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import cast

from ledgermq import speedups
from ledgermq.acl.signing import Credentials, signer
from ledgermq.aio.periodic import Periodic
from ledgermq.broker.acl_gate import AclGate, acl_file_path
from ledgermq.broker.clients import ConsumerManager, ProducerManager
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.context import Broker
from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.roles import ControllerRoles
from ledgermq.broker.controller_mode.service import ControllerModeService
from ledgermq.broker.dledger import BrokerDLedger, follower_broker_id
from ledgermq.broker.filter_cache import DispatchMatchCache
from ledgermq.broker.long_polling import PullHoldService
from ledgermq.broker.metrics_http import BrokerMetrics
from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.processors import (
    admin,
    admin_ops,
    clients,
    controller_mode,
    dledger_admin,
    ha_status,
    locks,
    pull,
    queries,
    send,
    send_back,
    stats,
    timer,
    transactions,
)
from ledgermq.broker.processors.common import answers_at_once, bind
from ledgermq.broker.registration import Registrar, RegistrationAnswer
from ledgermq.broker.schedule import ScheduleService
from ledgermq.broker.slave_sync import MasterOffsetReconciler, SlaveSynchronizer
from ledgermq.broker.starting_role import StartingRole
from ledgermq.broker.subscriptions import SubscriptionGroupManager
from ledgermq.broker.timer.service import TimerService
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.broker.transactions.check_service import TransactionCheckService
from ledgermq.broker.upkeep import BrokerUpkeep
from ledgermq.broker.write_turn import WriteTurn
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import BrokerRole, FlushDiskType, StoreConfig
from ledgermq.errors import StoreLockedError
from ledgermq.ha.config import HAConfig
from ledgermq.ha.master import HAService
from ledgermq.ha.slave import HAClient
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import InlineProcessor, RemotingServer
from ledgermq.startup import bind_failed, store_locked
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)

PROCESSOR_MODULES = [
    send, pull, clients, queries, admin, admin_ops, locks, send_back, ha_status, dledger_admin, stats, transactions,
    controller_mode,
    timer,
]  # fmt: skip


class BrokerApp:
    def __init__(
        self,
        config: BrokerConfig,
        store_config: StoreConfig,
        clock: Clock = SYSTEM_CLOCK,
        ha_config: HAConfig | None = None,
        controller_mode: ControllerModeConfig | None = None,
    ) -> None:
        self.base_config = config
        start = StartingRole.of(config, store_config, controller_mode)
        config, store_config, ctl = start.config, start.store_config, start.controller
        dledger_mode = store_config.enable_dleger_commit_log
        self.ha_config = ha_config or HAConfig()
        self.clock = clock
        store = open_message_store(store_config, clock=clock, store_host=(config.broker_ip1, config.listen_port))
        self.broker = self._build_broker(config, store_config, store)
        self.server = RemotingServer(
            config.listen_host,
            config.listen_port,
            name=f"broker {config.broker_name}/{config.broker_id}",
            max_frame_size=config.max_frame_size,
            max_inflight_per_connection=config.max_inflight_per_connection,
            max_inflight_total=config.max_inflight_total,
        )
        self._wire_delivery(may_lead=config.is_master or dledger_mode or ctl is not None)
        own = config.acl_credentials  # signs this broker's requests to other brokers (ACL)
        self.client = RemotingClient(sign=signer(Credentials(*own)) if own else None)
        self.acl: AclGate | None = None  # aclEnable: loaded at start
        self.registrar = Registrar(
            config, self.broker.topics, self.client, on_answer=self._on_registration, hold_back=self._registration_hold
        )
        self.master_ha_addr: str | None = None  # learned from name servers (slaves)
        self.master_addr: str | None = None
        self.slave_sync: SlaveSynchronizer | None = None
        self.offset_reconciler: MasterOffsetReconciler | None = None
        self.ha_service: HAService | None = None  # controller mode: started while master
        self.controller: ControllerModeService | None = None
        self.controller_roles: ControllerRoles | None = None
        if ctl is not None:
            assert start.master_role is not None
            self._wire_controller_mode(ctl, start.master_role)
        elif dledger_mode:
            self._wire_dledger_mode()
        elif config.is_master:
            self._wire_master()
        else:
            self._wire_slave()
        self._connect_write_turn()
        self.metrics = BrokerMetrics(self.broker)  # served only when metricsPort > 0
        self.upkeep = BrokerUpkeep(self.broker)
        self._periodic: list[Periodic] = []
        self._role_tasks: set[asyncio.Task[None]] = set()
        self._role_lock = asyncio.Lock()
        self._stopping = False
        self._register_processors_and_hooks()

    def _connect_write_turn(self) -> None:
        """The write turn (broker/write_turn) pumps the HA links and releases the sends their
        acks cover; a slave's raw appends are dispatched by it too."""
        b = self.broker
        # the step's released answers leave as it ends, one write per connection (net/read_round.py)
        # the broker is the step's ReplicationSource: its ``ha`` comes and goes with the role
        turn = b.turn = WriteTurn(b.store, self.clock, b, b.pull_hold.arrived, self.server.read_round)
        for ha in (b.ha, self.ha_service):
            if ha is not None:
                ha.follow_store = False
                ha.on_replicated = turn.changed
        if self.ha_client is not None:
            self.ha_client.on_appended = turn.replica_appended  # after its ack, on the reput cadence

    # -- the settings, held once (by the broker context) ---------------------------------
    @property
    def config(self) -> BrokerConfig:
        return self.broker.config

    @property
    def store_config(self) -> StoreConfig:
        return self.broker.store_config

    @property
    def ha_client(self) -> HAClient | None:
        """A slave's (or a controller-mode replica's) replication client; held by the broker
        context, which HA status answers from."""
        return self.broker.ha_client

    @ha_client.setter
    def ha_client(self, client: HAClient | None) -> None:
        self.broker.ha_client = client

    def make_current(self, config: BrokerConfig | None = None, store_config: StoreConfig | None = None) -> None:
        """The one way a running broker's settings change (a live config change, a DLedger or
        controller role change): every reader gets the new object in the same step, so none
        sees a mix of old and new, and the name servers hear of it at once."""
        b = self.broker
        if store_config is not None:
            b.store_config = store_config
            b.store.config = store_config  # the store reads its role from here (puts, offset correction)
        if config is not None:
            b.config = config
            self.registrar.config = config
            self.registrar.kick()

    # -- BrokerHost: what the broker context asks of the application ---------------------
    async def register_now(self) -> None:
        await self.registrar.sync()

    def apply_config(self, new: BrokerConfig) -> None:
        """UPDATE_BROKER_CONFIG: the changed settings become current for the processors, the
        registrar and the periodic tasks (and survive a DLedger role change, which rebuilds
        the config from ``base_config``); the name servers get the whole table at once so a
        new brokerPermission reaches the routes now, not at the next period."""
        changed = {
            f.name: getattr(new, f.name)
            for f in dataclasses.fields(new)
            if f.name != "broker_id" and getattr(new, f.name) != getattr(self.config, f.name)
        }
        self.base_config = dataclasses.replace(self.base_config, **changed)
        if "broker_permission" in changed:
            self.broker.topics.bump_version()
        self.make_current(dataclasses.replace(self.config, **changed))

    def _build_broker(self, config: BrokerConfig, store_config: StoreConfig, store: MessageStore) -> Broker:
        """The context every processor is bound to: the store and the metadata managers."""
        clock = self.clock
        root = Path(store_config.root_dir)
        return Broker(
            config=config,
            store_config=store_config,
            store=store,
            topics=TopicConfigManager(root / "config" / "topics.json", config, clock),
            offsets=ConsumerOffsetManager(root / "config" / "consumerOffset.json"),
            subscriptions=SubscriptionGroupManager(
                root / "config" / "subscriptionGroup.json", clock, config.auto_create_subscription_group
            ),
            consumers=ConsumerManager(),
            producers=ProducerManager(),
            pull_hold=PullHoldService(),
            clock=clock,
            host=self,
        )

    def _wire_delivery(self, may_lead: bool) -> None:
        """The services that deliver later what was stored now: delay levels (a broker that
        is or may become master: DLedger and controller modes run it while master), timer
        messages (filed on every broker, delivered by the master, started and stopped
        wherever the delay-level service is), and the transaction check-back (a master's,
        or while it leads, as RocketMQ's startProcessorByHa / shutdownProcessorByHa)."""
        b, store, clock = self.broker, self.broker.store, self.clock
        if may_lead:
            b.schedule = ScheduleService(
                store, Path(self.store_config.root_dir) / "config" / "delayOffset.json", clock, put=b.put
            )
        b.timer = TimerService(store, b.put, clock, on_written=self._step_now)
        self.txn_check = TransactionCheckService(b)

    def _slave_synchronizer(self) -> SlaveSynchronizer:
        """Copies metadata (topics, offsets, delay offsets, groups) from the current master."""
        cfg = self.config
        return SlaveSynchronizer(
            self.broker,
            self.client,
            lambda: self.master_addr,
            cfg.slave_sync_interval_ms / 1000,
            namesrvs=cfg.namesrv_addrs,
        )

    def _wire_dledger_mode(self) -> None:
        """A Raft member; it syncs metadata from whichever broker the leader's is."""
        cfg = self.config
        store = self.broker.store
        assert isinstance(store, DLedgerMessageStore)  # open_message_store: enableDLegerCommitLog
        self.broker.dledger = BrokerDLedger(
            store, self.store_config, cfg.listen_host, self._on_dledger_role, clock=self.clock
        )
        self.broker.dledger.after_commit = self._notify_ha  # the turn's step dispatches commits
        self.slave_sync = self._slave_synchronizer()

    def _wire_master(self) -> None:
        """A fixed master: serves its slaves' HA connections, and reconciles offsets they hold."""
        cfg = self.config
        self.broker.ha = HAService(
            self.broker.native_store,
            cfg.listen_host,
            cfg.ha_port,
            self.ha_config,
            clock=self.clock,
            sync_master=self.store_config.broker_role is BrokerRole.SYNC_MASTER,
        )
        self.offset_reconciler = MasterOffsetReconciler(
            self.broker, self.client, cfg.namesrv_addrs, cfg.slave_sync_interval_ms / 1000
        )

    def _wire_slave(self) -> None:
        """A fixed slave: copies the commit log from the master (from the name servers, or
        haMasterAddress) and its metadata."""
        self.ha_client = HAClient(
            self.broker.native_store,
            lambda: self.master_ha_addr or self.ha_config.master_address or None,
            self.ha_config,
            clock=self.clock,
        )
        self.slave_sync = self._slave_synchronizer()

    def _register_processors_and_hooks(self) -> None:
        """Every processor module's request codes, and the callbacks between the parts."""
        b = self.broker
        for module in PROCESSOR_MODULES:
            for code, fn in module.PROCESSORS.items():
                if answers_at_once(fn):  # never a Deferred or an awaitable: no slot to hold
                    self.server.register_inline(code, cast(InlineProcessor, bind(fn, b)))
                else:
                    self.server.register(code, bind(fn, b))
        self.upkeep.follow_client_events(self.server)
        if self.config.enable_property_filter:
            b.filter_cache = DispatchMatchCache(self.clock)
            b.store.add_dispatch_hook(b.filter_cache.on_dispatch)
        b.topics.on_change.append(self.registrar.topic_changed)

    def _wire_controller_mode(self, ctl: ControllerModeConfig, master_role: BrokerRole) -> None:
        """Controller mode: every role's parts are built now and started by the role the
        controller gives (controller_mode/roles.py); none runs before it."""
        b, cfg, store = self.broker, self.config, self.broker.native_store
        self.ha_service = HAService(
            store,
            cfg.listen_host,
            cfg.ha_port,
            self.ha_config,
            clock=self.clock,
            sync_master=master_role is BrokerRole.SYNC_MASTER,
        )
        slave_ha = dataclasses.replace(self.ha_config, master_address="")  # the controller names the master
        durable = self.store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH  # see HAClient.ack_durable
        self.ha_client = HAClient(store, lambda: self.master_ha_addr, slave_ha, clock=self.clock, ack_durable=durable)
        interval = cfg.slave_sync_interval_ms / 1000
        self.slave_sync = SlaveSynchronizer(b, self.client, lambda: self.master_addr, interval)
        self.offset_reconciler = MasterOffsetReconciler(b, self.client, cfg.namesrv_addrs, interval)
        roles = self.controller_roles = ControllerRoles(self, master_role)
        service = self.controller = ControllerModeService(
            ctl,
            cfg,
            self.store_config.root_dir,
            lambda: store.max_phy_offset,
            self.ha_service,
            roles,
            clock=self.clock,
            last_epoch=lambda: self._last_epoch(),
        )
        service.waits_for_replicas = lambda: self.broker.store_config.broker_role is BrokerRole.SYNC_MASTER
        b.controller = service

    def _last_epoch(self) -> int:
        """The HA epoch of our last byte (a heartbeat's ``epoch``: elections prefer the highest)."""
        ha, client = self.broker.ha, self.ha_client
        if ha is not None:
            return ha.epochs.last_epoch
        if client is not None and client.epochs is not None:
            return client.epochs.epoch_at(self.broker.store.max_phy_offset)
        return 0

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        """Start everything in order. If any step fails (a port taken, the store in use), what
        already started is stopped again: the store is marked cleanly stopped and unlocked, no
        task is left pending, and nothing is unregistered (the name server's entry for this
        address may belong to the broker that holds the port). The error is a StartupError
        naming the cause and the key to change."""
        b = self.broker
        if self.config.acl_enable:  # before anything else: a bad ACL file changes nothing
            self.acl = AclGate(acl_file_path(self.config))
            await self.acl.start()
            self.server.gate = self.acl.check
        try:
            await asyncio.to_thread(b.store.start)
        except BaseException as exc:
            await self._stop_acl()
            if isinstance(exc, StoreLockedError):
                raise store_locked(exc) from None
            raise
        try:
            await self._start_services()
        except BaseException:
            await self._shutdown(unregister=False)
            raise
        log.info(
            "broker %s (id %d) serving on port %d (%s)",
            self.config.broker_name,
            self.config.broker_id,
            self.port,
            speedups.describe(),
        )

    async def _stop_acl(self) -> None:
        if self.acl is not None:
            await self.acl.stop()

    async def _start_services(self) -> None:
        b = self.broker
        cfg = self.config
        b.pull_hold.bind(asyncio.get_running_loop())
        b.store.add_arrival_listener(
            b.turn.inbox.post_arrival if b.turn is not None else b.pull_hold.arrived_threadsafe
        )
        turn = b.turn
        assert turn is not None
        turn.bind(asyncio.get_running_loop())
        b.store.set_appender_dispatches(True)  # the turn's step dispatches what the loop appended
        if isinstance(b.store, NativeMessageStore):  # DLedger mode: the Raft driver flushes
            b.store.report_flushes(turn.inbox.post_durable)
        b.topics.load()
        b.topics.persist()
        b.offsets.load()
        b.subscriptions.load()
        if b.schedule is not None:
            b.schedule.load()
        if b.timer is not None:
            await b.timer.open()
            b.timer.start_filing()
        if b.ha is not None:
            try:
                await b.ha.start()
            except OSError as exc:
                key = "haListenPort" if cfg.ha_listen_port else "haListenPort (default listenPort + 1)"
                raise bind_failed("HA port", cfg.listen_host, cfg.ha_port, key, exc) from None
        if b.dledger is not None:
            try:
                await b.dledger.start()
            except OSError as exc:
                raise bind_failed("DLedger port", cfg.listen_host, b.dledger.server.port, "dLegerPeers", exc) from None
        try:
            await self.server.start()
        except OSError as exc:
            raise bind_failed("listen port", cfg.listen_host, cfg.listen_port, "listenPort", exc) from None
        if cfg.metrics_port > 0:
            metrics_host = cfg.metrics_host or cfg.listen_host
            try:
                await self.metrics.start(cfg.metrics_port, metrics_host)
            except OSError as exc:
                raise bind_failed("metrics port", metrics_host, cfg.metrics_port, "metricsPort", exc) from None
        ctl = self.controller
        if b.schedule is not None and b.dledger is None and ctl is None:  # else started with the role
            b.schedule.start()  # after the binds: a failed start leaves no delivery task behind
        if cfg.is_master and b.dledger is None and not self.store_config.is_slave:
            self.txn_check.start()
            if b.timer is not None and ctl is None:  # else started with the role
                b.timer.start()
        self.registrar.start()
        if self.ha_client is not None and ctl is None:
            self.ha_client.start()
        if self.slave_sync is not None and not (b.dledger is not None and b.dledger.is_master) and ctl is None:
            self.slave_sync.start()
        if self.offset_reconciler is not None and ctl is None:
            self.offset_reconciler.start()
        if ctl is not None:
            ctl.start()
        self._periodic = self.upkeep.periodic_tasks()
        for task in self._periodic:
            task.start()

    async def stop(self) -> None:
        await self._shutdown(unregister=True)

    async def _shutdown(self, unregister: bool) -> None:
        self._stopping = True  # role changes from now on leave the services alone
        for task in self._periodic:
            await task.stop()
        for role_task in list(self._role_tasks):
            await asyncio.gather(role_task, return_exceptions=True)
        if self.controller is not None:  # first: no role change runs while the rest stops
            await self.controller.stop()
        if self.controller_roles is not None:
            await self.controller_roles.stop()
        await self.metrics.stop()
        await self.registrar.stop()
        if unregister:
            await self.registrar.unregister_all()
        if self.slave_sync is not None:
            await self.slave_sync.stop()
        if self.offset_reconciler is not None:
            await self.offset_reconciler.stop()
        if self.ha_client is not None:
            await self.ha_client.stop()
        await self.server.stop()
        if self.broker.turn is not None:
            self.broker.turn.stop()  # answers to closed connections: nobody hears them
        await self.txn_check.stop()  # before Raft stops: its writes go through it
        if self.broker.schedule is not None:  # before Raft stops: its writes go through it
            await self.broker.schedule.stop()
        if self.broker.timer is not None:  # likewise; then its files are made durable and closed
            await self.broker.timer.close()
        if self.broker.dledger is not None:
            await self.broker.dledger.stop()
        if self.broker.ha is not None:
            await self.broker.ha.stop()
            self.broker.ha = None
        await self.client.close()
        await self._stop_acl()
        self.upkeep.persist_offsets()
        self.upkeep.close_metadata()
        await asyncio.to_thread(self.broker.store.shutdown)

    def _on_dledger_role(self, master: bool) -> None:
        """The Raft role changed: register under the new brokerId at once; then the services
        that depend on the role follow it (``_follow_dledger_role``)."""
        broker_id = 0 if master else follower_broker_id(self.store_config.dleger_self_id)
        self.make_current(dataclasses.replace(self.base_config, broker_id=broker_id))
        task = asyncio.ensure_future(self._follow_dledger_role())
        self._role_tasks.add(task)
        task.add_done_callback(self._role_tasks.discard)

    async def _follow_dledger_role(self) -> None:
        """RocketMQ's DLedgerRoleChangeHandler: a master delivers delayed messages and copies
        nothing; a slave copies the master's metadata (delay offsets included) and delivers
        nothing. Switches run one at a time and apply the role as it is when they run, not
        as it was when they were asked for, so quick flips cannot leave both running."""
        async with self._role_lock:
            dledger, schedule, sync = self.broker.dledger, self.broker.schedule, self.slave_sync
            if self._stopping or dledger is None:
                return
            if sync is not None:
                await sync.stop()
            if dledger.is_master:
                if schedule is not None:
                    schedule.start()  # from the offsets last synced from the old master (or its own)
                if self.broker.timer is not None:
                    self.broker.timer.start()  # from the timer progress last synced likewise
                self.txn_check.start()  # likewise from the synced CID_RMQ_SYS_TRANS offsets
            else:
                if schedule is not None:
                    await schedule.stop()  # persists its offsets; the next sync brings the master's
                if self.broker.timer is not None:
                    await self.broker.timer.stop()
                await self.txn_check.stop()
                if sync is not None:
                    sync.start()

    def _step_now(self) -> None:
        """The timer service wrote to the store: run the end-of-turn step now (dispatch and
        replicate it), not in a later pass of the loop, so its cost counts as delivery's own
        in pacing (broker/timer/pacing.py)."""
        if self.broker.turn is not None:
            self.broker.turn.appended_now()

    def _notify_ha(self) -> None:
        """The store was written outside a send (a DLedger commit): the end of this turn
        dispatches (and replicates) it. On a follower too: its commits come a Ready at a
        time, already batched, and the replicas' cadence (write_turn/turn.py) measured no
        better for it at one send in flight and a tenth worse at 256 (docs/benchmarks.md)."""
        if self.broker.turn is not None:
            self.broker.turn.appended()

    def _registration_hold(self, config: BrokerConfig) -> str | None:
        """A DLedger leader claims brokerId 0 only while its leadership is current: one
        resumed after a pause (SIGSTOP, a stall) longer than an election timeout may have
        been replaced, and a stale master registration would displace the real leader's
        in the name server until that one's next periodic registration."""
        ctl = self.controller
        if ctl is not None:
            if ctl.role.value not in ("MASTER", "SLAVE"):
                return "no role from the controller yet"
            return ctl.registration_hold() if config.broker_id == 0 else None
        dledger = self.broker.dledger
        if dledger is None or config.broker_id != 0 or dledger.leadership_current():
            return None
        return "this broker's Raft leadership is not current (paused longer than an election timeout?)"

    def _on_registration(self, answer: RegistrationAnswer) -> None:
        """A slave learns (or relearns, after a master change) where its master is (in
        controller mode from the controller, not from the name servers)."""
        if self.controller is not None:
            return
        if answer.ha_server_addr and answer.ha_server_addr != self.master_ha_addr:
            log.info("master of %s: %s (HA %s)", self.config.broker_name, answer.master_addr, answer.ha_server_addr)
            self.master_ha_addr = answer.ha_server_addr
        if answer.master_addr:
            self.master_addr = answer.master_addr
        if answer.ha_server_addr and self.ha_client is not None:
            self.ha_client.kick()  # the master is (back) in the name server: reconnect now, not after back-off
