"""The push consumer (RocketMQ 4.9.7 ``DefaultMQPushConsumer`` / ``DefaultMQPushConsumerImpl``)::

    consumer = PushConsumer("cg", "127.0.0.1:9876")
    consumer.subscribe("TopicA", "tagA || tagB")
    consumer.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    async with consumer:
        ...

What happens underneath, as in Java:

* the shared ``ClientInstance`` heartbeats the group's subscriptions to every broker and
  calls ``do_rebalance`` every 20 s and whenever a broker says the group's members changed;
* ``RebalanceImpl`` decides the queues this member reads; each assigned queue gets one
  long-polling pull loop, which stops pulling while the queue's cache is full;
* pulled messages go to the consume service (concurrently or orderly, chosen by the
  listener registered), which acknowledges by moving the queue's offset in the offset
  store; offsets reach the broker every ``persist_consumer_offset_interval`` seconds, on
  every pull to the master (the commit-offset flag), and at shutdown;
* CLUSTERING groups subscribe their retry topic ``%RETRY%group`` as well, and messages
  coming back from it get their original topic before the listener sees them;
  BROADCASTING consumers keep their offsets in a local file and never send messages back.

This module is the facade: the settings, the lifecycle, and what the client instance and
the rebalance call. The pull loops are ``push_pull_loop``'s, the answers to brokers'
requests (running info, offset reset, direct consumption) ``push_broker_requests``', the
producer failed messages are re-sent through ``inner_producer``'s, checking the settings
``push_settings``'; consuming is the consume service's (``consume_service``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.acl.signing import Credentials
from ledgermq.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from ledgermq.client.consumer.common import DEFAULT_CONSUMER_GROUP as DEFAULT_CONSUMER_GROUP
from ledgermq.client.consumer.common import (
    PULL_DELAY_WHEN_BROKER_FLOW_CONTROL as PULL_DELAY_WHEN_BROKER_FLOW_CONTROL,
)
from ledgermq.client.consumer.common import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageSelector,
    SubscriptionData,
    retry_topic,
    selector_of,
)
from ledgermq.client.consumer.offset_store import OffsetStore, ReadOffsetType
from ledgermq.client.consumer.parts import BackgroundTasks, load_offset_store, rebalance_for
from ledgermq.client.consumer.rebalance import PullRequest, RebalanceImpl
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.instance.client_check import check_client_in_broker
from ledgermq.client.instance.client_instance import ClientInstance, local_ip
from ledgermq.client.instance.pull_api import PullAPI
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push import broker_requests as push_broker_requests
from ledgermq.client.push.broker_requests import CLIENT_VERSION as CLIENT_VERSION
from ledgermq.client.push.broker_requests import ConsumerStats
from ledgermq.client.push.consume_orderly import ConsumeMessageOrderlyService
from ledgermq.client.push.consume_service import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageConcurrentlyService,
    ConsumeMessageService,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    Listener,
)
from ledgermq.client.push.inner_producer import CLIENT_INNER_PRODUCER as CLIENT_INNER_PRODUCER
from ledgermq.client.push.inner_producer import InnerProducerRef
from ledgermq.client.push.pull_loop import MIB as MIB
from ledgermq.client.push.pull_loop import PULL_DELAY_WHEN_SUSPENDED as PULL_DELAY_WHEN_SUSPENDED
from ledgermq.client.push.pull_loop import PullLoops
from ledgermq.client.push.settings import check_settings, checked_group, heartbeat_data
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.command import RemotingCommand
from ledgermq.util.ratelog import limited

# Also re-exported (imported "as" themselves above): the constants that were defined here
# before the pull loops, the broker requests and the inner producer moved out.
__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "MessageModel",
    "PushConsumer",
]

log = logging.getLogger(__name__)


class PushConsumer:
    """A consumer that pulls on its own and hands messages to a listener."""

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        consume_thread_min: int = 20,
        consume_thread_max: int = 20,
        consume_concurrently_max_span: int = 2000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_topic: int = -1,
        pull_threshold_size_for_topic: int = -1,
        pull_interval: float = 0.0,
        pull_batch_size: int = 32,
        consume_message_batch_max_size: int = 1,
        max_reconsume_times: int = -1,
        consume_timeout: float = 15.0,
        suspend_current_queue_time_millis: int = 1000,
        persist_consumer_offset_interval: float = 5.0,
        rebalance_interval: float = 20.0,
        heartbeat_interval: float = 30.0,
        poll_namesrv_interval: float = 30.0,
        api_timeout: float = 3.0,
        instance_name: str = "DEFAULT",
        client_ip: str | None = None,
        offset_store: OffsetStore | None = None,
        offset_store_dir: str | None = None,
        broker_suspend_max_time: float = 15.0,
        consumer_timeout_when_suspend: float = 30.0,
        pull_delay_when_exception: float = 3.0,
        flow_control_delay: float = 0.05,
        local_reconsume_delay: float = 5.0,
        lock_interval: float = 20.0,
        unlock_delay: float = 20.0,
        offset_illegal_fix_delay: float = 10.0,
        reset_offset_wait: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
        credentials: Credentials | None = None,
    ) -> None:
        """Options are Java's (snake case); times in seconds unless the name says millis.
        ``pull_threshold_size_for_queue`` is in MiB; ``consume_timeout`` in minutes;
        ``max_reconsume_times`` -1 means 16 (concurrently) or unlimited (orderly)."""
        group = checked_group(group)
        check_settings(
            consume_thread_min=consume_thread_min,
            consume_thread_max=consume_thread_max,
            consume_concurrently_max_span=consume_concurrently_max_span,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            pull_threshold_for_topic=pull_threshold_for_topic,
            pull_threshold_size_for_topic=pull_threshold_size_for_topic,
            pull_batch_size=pull_batch_size,
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_interval=pull_interval,
            consume_timestamp=consume_timestamp,
        )
        self.group = group
        self.namesrv_addrs = namesrv_addrs
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.allocate_strategy: AllocateStrategy = allocate_strategy or AllocateMessageQueueAveragely()
        self.consume_thread_min = consume_thread_min
        self.consume_thread_max = consume_thread_max
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.pull_threshold_for_topic = pull_threshold_for_topic
        self.pull_threshold_size_for_topic = pull_threshold_size_for_topic
        self.pull_interval = pull_interval
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout = consume_timeout
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.rebalance_interval = rebalance_interval
        self.heartbeat_interval = heartbeat_interval
        self.poll_namesrv_interval = poll_namesrv_interval
        self.api_timeout = api_timeout
        self.instance_name = instance_name
        self.client_ip = client_ip or local_ip()
        self.offset_store_dir = offset_store_dir
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self.pull_delay_when_exception = pull_delay_when_exception
        self.flow_control_delay = flow_control_delay
        self.local_reconsume_delay = local_reconsume_delay
        self.lock_interval = lock_interval
        self.unlock_delay = unlock_delay
        self.offset_illegal_fix_delay = offset_illegal_fix_delay
        self.reset_offset_wait = reset_offset_wait
        self.clock = clock
        self.credentials = credentials  # ACL: every request of its client instance is signed

        self.subscriptions: dict[str, SubscriptionData] = {}
        self.listener: Listener | None = None
        self.orderly = False
        self.paused = False
        self.stats = ConsumerStats()
        self._given_offset_store = offset_store
        self._state = "created"
        self._start_ms = 0
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._rebalance: RebalanceImpl | None = None
        self._service: ConsumeMessageService | None = None
        self._inner = InnerProducerRef()
        self._background = BackgroundTasks(group, log)
        self._pulls = PullLoops(self, self._background, active=lambda: self._state in ("running", "starting"))
        self._shut_down: asyncio.Event | None = None

    # -- configuration -------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*", *, expression_type: str = "TAG") -> None:
        """Consume ``topic``'s messages matching ``expression``: by tag ("*" or "tagA || tagB"),
        or with ``expression_type="SQL92"`` (or ``MessageSelector.by_sql(...)``) by a SQL92
        expression over the message properties, checked here (MQClientError when invalid)
        and evaluated by the broker (which needs ``enablePropertyFilter=true``)."""
        if not topic or not topic.strip():
            raise MQClientError("the topic is blank")
        text, kind = selector_of(expression, expression_type)
        self.subscriptions[topic] = SubscriptionData.build(topic, text, expression_type=kind)
        if self._state == "running" and self._instance is not None:
            self._instance.routes.watch(topic)
            self._background.spawn(self._instance.heartbeat, "heartbeat after subscribe")

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    def register_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeConcurrentlyStatus``; a plain function runs in the
        worker pool, an ``async def`` one on the event loop."""
        self.listener = fn
        self.orderly = False

    def register_orderly_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeOrderlyStatus``: one queue's messages one batch at a
        time, in offset order."""
        self.listener = fn
        self.orderly = True

    def suspend(self) -> None:
        """Stop pulling (queues stay assigned) until ``resume``."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        if self._instance is not None:
            self._instance.rebalance_now()

    def effective_max_reconsume_times(self, *, orderly: bool) -> int:
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if orderly else 16
        return self.max_reconsume_times

    # -- parts that exist once started ---------------------------------------------------
    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError("the consumer is not started")
        return self._instance

    @property
    def pull_api(self) -> PullAPI:
        return self.instance.pull_api

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise ClientStateError("the consumer is not started")
        return self._offset_store

    @property
    def rebalance_impl(self) -> RebalanceImpl:
        if self._rebalance is None:
            raise ClientStateError("the consumer is not started")
        return self._rebalance

    @property
    def consume_service(self) -> ConsumeMessageService:
        if self._service is None:
            raise ClientStateError("the consumer is not started")
        return self._service

    async def inner_producer(self) -> Producer:
        """The instance's producer for re-sending failed messages, started on first use."""
        return await self._inner.get(self.instance)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"the push consumer is {self._state}; it can be started once")
        if self.listener is None:
            raise MQClientError("no listener registered (register_listener or register_orderly_listener)")
        self._state = "starting"
        try:
            await self._start()
        except BaseException:
            self._state = "start failed"
            await self._teardown(persist=False)
            raise
        self._state = "running"
        self._start_ms = self.clock.wall_ms()
        log.info("push consumer %s started as %s (%s)", self.group, self.client_id, self.message_model.value)

    async def _start(self) -> None:
        if self.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(self.group)
            if rt not in self.subscriptions:
                self.subscriptions[rt] = SubscriptionData.build(rt, "*")
        instance = ClientInstance.acquire(
            self.namesrv_addrs,
            client_ip=self.client_ip,
            instance_name=self.instance_name,
            api_timeout=self.api_timeout,
            poll_namesrv_interval=self.poll_namesrv_interval,
            heartbeat_interval=self.heartbeat_interval,
            rebalance_interval=self.rebalance_interval,
            persist_interval=self.persist_consumer_offset_interval,
            clock=self.clock,
            credentials=self.credentials,
        )
        self._instance = instance
        store = await load_offset_store(self, instance, self._given_offset_store, self.offset_store_dir)
        self._offset_store = store
        self._rebalance = rebalance_for(
            self,
            instance,
            store,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            read_type=ReadOffsetType.READ_FROM_STORE,
            subscriptions=self.subscriptions,
            unlock_delay=self.unlock_delay,
        )
        assert self.listener is not None
        service_cls = ConsumeMessageOrderlyService if self.orderly else ConsumeMessageConcurrentlyService
        self._service = service_cls(self, self.listener)
        self._service.start()
        instance.register_consumer(self)
        self._state = "running"  # the instance may call do_rebalance from now on
        await instance.start()
        for topic in list(self.subscriptions):
            try:
                await instance.routes.update(topic)
            except MQClientError as exc:
                log.info("group %s: no route of %s yet: %s", self.group, topic, exc)
        await check_client_in_broker(instance, self.group, list(self.subscriptions.values()))
        await instance.heartbeat()
        instance.rebalance_now()

    async def shutdown(self) -> None:
        """Stop pulling and consuming, persist the offsets, leave the group, release the instance."""
        if self._state in ("shut down", "created"):
            self._state = "shut down"
            return
        if self._shut_down is not None:  # another call is shutting down: wait for it
            await self._shut_down.wait()
            return
        self._shut_down = asyncio.Event()
        was_running = self._state == "running"
        self._state = "shutting down"
        try:
            await self._teardown(persist=was_running)
        finally:
            self._state = "shut down"
            self._shut_down.set()
        log.info("push consumer %s shut down", self.group)

    async def _teardown(self, *, persist: bool) -> None:
        tasks = [*self._pulls.cancel(), *self._background.cancel()]
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("group %s: a task failed at shutdown", self.group)
        self._pulls.clear()
        if self._service is not None:
            await self._service.shutdown()
        if persist:
            await self.persist_offsets()
        instance = self._instance
        if instance is not None and instance.consumers.get(self.group) is self:
            await instance.unregister_consumer(self.group)
        if self._rebalance is not None:
            await self._rebalance.close()
        if instance is not None:
            await self._inner.release(instance)
            self._instance = None
            await instance.release()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    # -- what the client instance calls --------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        return heartbeat_data(self)

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)

    async def do_rebalance(self) -> None:
        if self._state != "running" or self.paused or self._rebalance is None:
            return
        await self._rebalance.do_rebalance(self.orderly)
        self._pulls.cancel_dropped()

    async def persist_offsets(self) -> None:
        if self._offset_store is None or self._rebalance is None:
            return
        try:
            await self._offset_store.persist_all(set(self._rebalance.process_queue_table))
        except Exception:
            limited.log(
                log,
                logging.ERROR,
                ("persist", self.group),
                "group %s: persisting the consumer offsets failed",
                self.group,
                exc_info=True,
            )

    def running_info(self) -> dict[str, Any]:
        """``ConsumerRunningInfo``."""
        return push_broker_requests.running_info(
            self, self._start_ms, self._instance, self._offset_store, self._rebalance
        )

    async def handle_broker_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return await push_broker_requests.handle_broker_request(self, cmd)

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """The broker's offset reset (``MQClientInstance.resetOffset``): pause, drop and empty
        the queues concerned, wait for running listeners, set the new offsets, resume."""
        await push_broker_requests.reset_offset(self, topic, offsets)

    # -- RebalanceListener ---------------------------------------------------------------
    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        sub = self.subscriptions.get(topic)
        if sub is not None:
            sub.sub_version = self.clock.wall_ms()
        self._pulls.share_topic_thresholds(len(self.rebalance_impl.process_queue_table))
        if self._instance is not None:
            await self._instance.heartbeat()

    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        self._pulls.dispatch(requests)

    async def pull_once(self, req: PullRequest) -> float | None:
        """One ``pullMessage`` round: the delay before the next one, None to stop."""
        return await self._pulls.pull_once(req)
