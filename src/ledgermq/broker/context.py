"""What every broker processor may use: config, store, managers, clock. Wiring is in app.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ledgermq.broker.clients import ConsumerManager, ProducerManager
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.consumer_filters import ConsumerFilterManager
from ledgermq.broker.controller_mode.service import ControllerModeService
from ledgermq.broker.dledger import BrokerDLedger, Proposal
from ledgermq.broker.filter_cache import DispatchMatchCache
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
from ledgermq.ha.master import HAService
from ledgermq.protocol.message import Host
from ledgermq.protocol.properties import WAIT
from ledgermq.protocol.route import PERM_READ, PERM_WRITE
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutResult


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
    extras: dict[str, object] = field(default_factory=dict)
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
    # Controller mode: why a write (that waits for replicas: True) may not be taken now, or
    # None (the role, the controller lease, minInSyncReplicas); asked by ``put``.
    write_gate: Callable[[bool], PutResult | None] | None = None
    # Waits (bounded) until the topic changes made so far reached the name servers; set by BrokerApp.
    register_now: Callable[[], Awaitable[None]] | None = None
    # Makes a changed BrokerConfig current everywhere it is kept (UPDATE_BROKER_CONFIG) and
    # registers the whole table again; set by BrokerApp.
    apply_config: Callable[[BrokerConfig], None] | None = None

    def __post_init__(self) -> None:
        self.stats = BrokerStats(now_ms=self.clock.wall_ms)

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
        gate = self.write_gate
        if gate is not None and (refused := gate(wait)) is not None:
            return refused
        result = self.store.put_message(msg) if isinstance(msg, MessageInput) else self.store.put_messages(msg)
        if result.append is not None and self.turn is not None:
            self.turn.appended()
        return result

    @property
    def store_host(self) -> Host:
        return (self.config.broker_ip1, self.config.listen_port)

    @property
    def writable(self) -> bool:
        return bool(self.config.broker_permission & PERM_WRITE) and not self.store_config.is_slave

    @property
    def readable(self) -> bool:
        return bool(self.config.broker_permission & PERM_READ)
