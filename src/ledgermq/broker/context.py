"""What every broker processor may use: config, store, managers, clock. Wiring is in app.py.

Every service a processor reaches is a typed field here, built by BrokerApp (or, for the
few that need nothing but the clock, here); nothing is looked up by name. What the broker
asks of the application around it (register now, make a changed config current) is one
typed collaborator, ``host``, passed in at construction rather than callbacks set later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ledgermq.broker.clients import ConsumerManager, ProducerManager
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.consumer_filters import ConsumerFilterManager
from ledgermq.broker.controller_mode.service import ControllerModeService
from ledgermq.broker.dledger import BrokerDLedger, Proposal
from ledgermq.broker.filter_cache import DispatchMatchCache
from ledgermq.broker.locks import RebalanceLockManager
from ledgermq.broker.long_polling import PullHoldService
from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.schedule import ScheduleService
from ledgermq.broker.stats import BrokerStats
from ledgermq.broker.subscriptions import SubscriptionGroupManager
from ledgermq.broker.timer.service import TimerService
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.broker.write_turn import WriteTurn
from ledgermq.clock import Clock
from ledgermq.config import StoreConfig
from ledgermq.errors import StoreError
from ledgermq.ha.master import HAService
from ledgermq.ha.slave import HAClient
from ledgermq.protocol.message import Host
from ledgermq.protocol.properties import WAIT
from ledgermq.protocol.route import PERM_READ, PERM_WRITE, DataVersion
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.results import PutResult
from ledgermq.util.unique_ids import UniqueIdGenerator

_NOT_NATIVE = "this broker's store is in DLedger mode: it writes through its Raft group"


class BrokerHost(Protocol):
    """What the broker asks of the application that runs it (BrokerApp; tests may fake it)."""

    async def register_now(self) -> None:
        """Wait (bounded) until the topic changes made so far reached the name servers."""

    def apply_config(self, new: BrokerConfig) -> None:
        """Make a changed BrokerConfig current everywhere it is read (UPDATE_BROKER_CONFIG)."""


@dataclass(slots=True)
class Broker:
    config: BrokerConfig
    store_config: StoreConfig
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    subscriptions: SubscriptionGroupManager
    consumers: ConsumerManager
    producers: ProducerManager
    pull_hold: PullHoldService
    clock: Clock
    host: BrokerHost | None = None  # the running application; None in unit tests of processors
    stats: BrokerStats = field(init=False)  # message and request counters (metrics, admin), on ``clock``
    filters: ConsumerFilterManager = field(default_factory=ConsumerFilterManager)  # SQL92 filters from heartbeats
    filter_cache: DispatchMatchCache | None = None  # SQL92 answers computed at dispatch; set by BrokerApp
    schedule: ScheduleService | None = None
    timer: TimerService | None = None  # timer messages (broker/timer/); set by BrokerApp
    ha: HAService | None = None  # a master's replication service
    # The write turn: the waits of SYNC_FLUSH, SYNC_MASTER and DLedger sends, and the
    # end-of-turn dispatch and replication of what the loop appended (set by BrokerApp).
    turn: WriteTurn | None = None
    dledger: BrokerDLedger | None = None  # DLedger mode: the Raft group decides the master
    controller: ControllerModeService | None = None  # controller mode: the controller decides the master
    ha_client: HAClient | None = None  # a slave's (or a controller-mode replica's) replication client
    locks: RebalanceLockManager = field(init=False)  # orderly consumers' queue locks (60 s lifetime)
    unique_ids: UniqueIdGenerator = field(init=False)  # UNIQ_KEYs of messages the broker writes itself
    config_version: DataVersion = field(init=False)  # GET_BROKER_CONFIG's version; moves on live changes

    def __post_init__(self) -> None:
        self.stats = BrokerStats(now_ms=self.clock.wall_ms)
        self.locks = RebalanceLockManager(self.clock)
        self.unique_ids = UniqueIdGenerator(self.config.broker_ip1)
        self.config_version = DataVersion(self.clock.wall_ms(), 0)

    def refuse_write(self, waits_for_replicas: bool) -> PutResult | None:
        """Why a write may not be taken now (controller mode: the role, the controller lease,
        minInSyncReplicas; controller_mode/gate.py), or None: it may."""
        ctl = self.controller
        return None if ctl is None else ctl.refuse_write(waits_for_replicas)

    async def register_now(self) -> None:
        """Topic changes made so far reach the name servers (bounded wait); no-op without a host."""
        if self.host is not None:
            await self.host.register_now()

    # -- the broker's one way to write ------------------------------------------------
    async def put(self, msg: MessageInput | BatchInput) -> PutResult:
        """Store ``msg`` the way this broker writes, for the broker's own writes (the schedule
        and timer services, consumer send-back, transactions): ``write``, then the Raft
        commit in DLedger mode. They wait for nothing else (as RocketMQ's internal puts)."""
        written = self.write(msg, msg.properties.get(WAIT) != "false" if isinstance(msg, MessageInput) else True)
        if isinstance(written, PutResult):
            return written
        await written.settled()
        return written.outcome()

    def write(self, msg: MessageInput | BatchInput, wait: bool) -> PutResult | Proposal:
        """The broker's one way to write, sends included: straight into the store natively,
        behind controller mode's gate (role, lease, minInSyncReplicas; ``wait``: the write
        waits for replicas), or proposed to the Raft group in DLedger mode (the store
        refuses direct puts there). What the loop appended is dispatched and replicated by
        the write turn's end-of-turn step."""
        if self.dledger is not None:
            return self.dledger.propose(msg)
        ctl = self.controller  # ``refuse_write`` and ``native_store`` spelled out: once per send
        if ctl is not None and (refused := ctl.refuse_write(wait)) is not None:
            return refused
        store = self.store
        if not isinstance(store, NativeMessageStore):
            raise StoreError(_NOT_NATIVE)
        result = store.put_message(msg) if isinstance(msg, MessageInput) else store.put_messages(msg)
        if result.append is not None and self.turn is not None:
            self.turn.appended()
        return result

    @property
    def native_store(self) -> NativeMessageStore:
        """The store, for what only a native store has (puts, HA, flush reports); a broker in
        DLedger mode has none of them (it proposes to its Raft group), and asking is an error."""
        store = self.store
        if not isinstance(store, NativeMessageStore):
            raise StoreError(_NOT_NATIVE)
        return store

    @property
    def store_host(self) -> Host:
        return (self.config.broker_ip1, self.config.listen_port)

    @property
    def writable(self) -> bool:
        return bool(self.config.broker_permission & PERM_WRITE) and not self.store_config.is_slave

    @property
    def readable(self) -> bool:
        return bool(self.config.broker_permission & PERM_READ)
