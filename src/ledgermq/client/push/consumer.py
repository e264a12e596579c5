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

This module is the facade: the lifecycle, and what the client instance and the rebalance
call. It holds no setting of its own: ``PushSettings`` (``push.settings``) holds them,
frozen and checked; ``PushState`` (``push.state``) what its parts share and see change.
Each part is handed what it needs when the consumer starts: the pull loops
(``push.pull_loop``), the consume service (``push.consume_service``,
``push.consume_orderly``), the answers to brokers' requests (``push.broker_requests``)
and the producer failed messages are re-sent through (``push.inner_producer``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.client.consumer.client_check import check_client_in_broker
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
from ledgermq.client.consumer.parts import (
    BackgroundTasks,
    ConsumerParts,
    load_offset_store,
    rebalance_for,
    with_client_ip,
)
from ledgermq.client.consumer.rebalance import PullRequest, RebalanceImpl
from ledgermq.client.consumer.settings import settings_of
from ledgermq.client.errors import ClientStateError, MQClientError
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.client.instance.pull_api import PullAPI
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push import broker_requests
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
from ledgermq.client.push.inner_producer import CLIENT_INNER_PRODUCER, InnerProducer, InnerProducerRef
from ledgermq.client.push.pull_loop import PullLoops
from ledgermq.client.push.settings import PushSettings, heartbeat_data
from ledgermq.client.push.state import ConsumerStats, PushState
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.command import RemotingCommand
from ledgermq.util.ratelog import limited

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "MessageModel",
    "PushConsumer",
    "PushSettings",
]

log = logging.getLogger(__name__)


class PushConsumer:
    """A consumer that pulls on its own and hands messages to a listener."""

    def __init__(
        self,
        group: str | None = None,
        namesrv_addrs: str | Sequence[str] | None = None,
        *,
        settings: PushSettings | None = None,
        offset_store: OffsetStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        **options: Any,
    ) -> None:
        """``PushConsumer("cg", "127.0.0.1:9876", pull_batch_size=16)`` or
        ``PushConsumer(settings=PushSettings(...))``: the keyword arguments are
        ``PushSettings``' fields (Java's options in snake case), checked when given.
        ``offset_store`` replaces the store the message model calls for."""
        self.settings = with_client_ip(settings_of(PushSettings, settings, group, namesrv_addrs, options))
        self.clock = clock
        self.listener: Listener | None = None
        self._state = PushState(self.settings, clock)
        self._given_offset_store = offset_store
        self._instance: ClientInstance | None = None
        self._parts: ConsumerParts | None = None
        self._service: ConsumeMessageService | None = None
        self._pulls: PullLoops | None = None
        self._inner = InnerProducerRef(_make_inner_producer)
        self._background = BackgroundTasks(self.settings.group, log)
        self._shut_down: asyncio.Event | None = None

    # -- the settings and state the application reads ----------------------------------
    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def message_model(self) -> MessageModel:
        return self.settings.message_model

    @property
    def subscriptions(self) -> dict[str, SubscriptionData]:
        return self._state.subscriptions

    @property
    def orderly(self) -> bool:
        """Whether the listener registered is an orderly one."""
        return self._state.orderly

    @property
    def paused(self) -> bool:
        return self._state.paused

    @property
    def stats(self) -> ConsumerStats:
        return self._state.stats

    # -- configuration -------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*", *, expression_type: str = "TAG") -> None:
        """Consume ``topic``'s messages matching ``expression``: by tag ("*" or "tagA || tagB"),
        or with ``expression_type="SQL92"`` (or ``MessageSelector.by_sql(...)``) by a SQL92
        expression over the message properties, checked here (MQClientError when invalid)
        and evaluated by the broker (which needs ``enablePropertyFilter=true``)."""
        if not topic or not topic.strip():
            raise MQClientError("the topic is blank")
        text, kind = selector_of(expression, expression_type)
        self.subscriptions[topic] = SubscriptionData.build(
            topic, text, expression_type=kind, sub_version=self.clock.wall_ms()
        )
        if self._state.lifecycle == "running" and self._instance is not None:
            self._instance.routes.watch(topic)
            self._background.spawn(self._instance.heartbeat, "heartbeat after subscribe")

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    def register_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeConcurrentlyStatus``; a plain function runs in the
        worker pool, an ``async def`` one on the event loop."""
        self.listener = fn
        self._state.orderly = False

    def register_orderly_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeOrderlyStatus``: one queue's messages one batch at a
        time, in offset order."""
        self.listener = fn
        self._state.orderly = True

    def suspend(self) -> None:
        """Stop pulling (queues stay assigned) until ``resume``."""
        self._state.paused = True

    def resume(self) -> None:
        self._state.paused = False
        if self._instance is not None:
            self._instance.rebalance_now()

    def effective_max_reconsume_times(self, *, orderly: bool) -> int:
        return self.settings.effective_max_reconsume_times(orderly=orderly)

    # -- parts that exist once started ---------------------------------------------------
    @property
    def running(self) -> bool:
        return self._state.lifecycle == "running"

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
    def parts(self) -> ConsumerParts:
        if self._parts is None:
            raise ClientStateError("the consumer is not started")
        return self._parts

    @property
    def offset_store(self) -> OffsetStore:
        return self.parts.offset_store

    @property
    def rebalance_impl(self) -> RebalanceImpl:
        return self.parts.rebalance

    @property
    def consume_service(self) -> ConsumeMessageService:
        if self._service is None:
            raise ClientStateError("the consumer is not started")
        return self._service

    async def inner_producer(self) -> InnerProducer:
        """The instance's producer for re-sending failed messages, started on first use."""
        return await self._inner.get(self.instance)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        state = self._state
        if state.lifecycle != "created":
            raise ClientStateError(f"the push consumer is {state.lifecycle}; it can be started once")
        if self.listener is None:
            raise MQClientError("no listener registered (register_listener or register_orderly_listener)")
        state.lifecycle = "starting"
        try:
            await self._start(self.listener)
        except BaseException:
            state.lifecycle = "start failed"
            await self._teardown(persist=False)
            raise
        state.lifecycle = "running"
        state.start_ms = self.clock.wall_ms()
        log.info("push consumer %s started as %s (%s)", self.group, self.client_id, self.message_model.value)

    async def _start(self, listener: Listener) -> None:
        settings, state = self.settings, self._state
        if settings.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(settings.group)
            if rt not in state.subscriptions:
                state.subscriptions[rt] = SubscriptionData.build(rt, "*", sub_version=self.clock.wall_ms())
        instance = ClientInstance.acquire(
            settings.namesrv_addrs,
            **settings.instance_options(),
            persist_interval=settings.persist_consumer_offset_interval,
            clock=self.clock,
        )
        self._instance = instance
        store = await load_offset_store(settings, instance, self._given_offset_store, settings.offset_store_dir)
        rebalance = rebalance_for(
            settings,
            instance,
            store,
            self,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            read_type=ReadOffsetType.READ_FROM_STORE,
            subscriptions=state.subscriptions,
            clock=self.clock,
            unlock_delay=settings.unlock_delay,
        )
        parts = self._parts = ConsumerParts(instance, store, rebalance)
        service_cls = ConsumeMessageOrderlyService if state.orderly else ConsumeMessageConcurrentlyService
        self._service = service_cls(state, parts, listener, self.inner_producer)
        self._service.start()
        # the loops run the public pull_once, so that what is there is what runs
        self._pulls = PullLoops(state, parts, self._service, self._background, pull_once=self._pull_once)
        instance.register_consumer(self)
        state.lifecycle = "running"  # the instance may call do_rebalance from now on
        await instance.start()
        for topic in list(state.subscriptions):
            try:
                await instance.routes.update(topic)
            except MQClientError as exc:
                log.info("group %s: no route of %s yet: %s", settings.group, topic, exc)
        await check_client_in_broker(instance, settings.group, list(state.subscriptions.values()))
        await instance.heartbeat()
        instance.rebalance_now()

    async def shutdown(self) -> None:
        """Stop pulling and consuming, persist the offsets, leave the group, release the instance."""
        state = self._state
        if state.lifecycle in ("shut down", "created"):
            state.lifecycle = "shut down"
            return
        if self._shut_down is not None:  # another call is shutting down: wait for it
            await self._shut_down.wait()
            return
        self._shut_down = asyncio.Event()
        was_running = state.lifecycle == "running"
        state.lifecycle = "shutting down"
        try:
            await self._teardown(persist=was_running)
        finally:
            state.lifecycle = "shut down"
            self._shut_down.set()
        log.info("push consumer %s shut down", self.group)

    async def _teardown(self, *, persist: bool) -> None:
        pulls = self._pulls.cancel() if self._pulls is not None else []
        for task in [*pulls, *self._background.cancel()]:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("group %s: a task failed at shutdown", self.group)
        if self._pulls is not None:
            self._pulls.clear()
        if self._service is not None:
            await self._service.shutdown()
        if persist:
            await self.persist_offsets()
        instance = self._instance
        if instance is not None and instance.consumers.get(self.group) is self:
            await instance.unregister_consumer(self.group)
        if self._parts is not None:
            await self._parts.rebalance.close()
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
        return heartbeat_data(self.settings, self._state.subscriptions.values())

    def subscribed_topics(self) -> set[str]:
        return set(self._state.subscriptions)

    async def do_rebalance(self) -> None:
        if self._state.lifecycle != "running" or self._state.paused or self._parts is None:
            return
        await self._parts.rebalance.do_rebalance(self._state.orderly)
        if self._pulls is not None:
            self._pulls.cancel_dropped()

    async def persist_offsets(self) -> None:
        parts = self._parts
        if parts is None:
            return
        try:
            await parts.offset_store.persist_all(set(parts.rebalance.process_queue_table))
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
        return broker_requests.running_info(self._state, self._parts)

    async def handle_broker_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if self._service is None:
            raise ClientStateError("the consumer is not started")
        return await broker_requests.handle_broker_request(cmd, self.parts, self._service, self.reset_offset)

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """The broker's offset reset (``MQClientInstance.resetOffset``): pause, drop and empty
        the queues concerned, wait for running listeners, set the new offsets, resume."""
        await broker_requests.reset_offset(self._state, self.parts, topic, offsets, self.do_rebalance)

    # -- RebalanceListener ---------------------------------------------------------------
    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        sub = self._state.subscriptions.get(topic)
        if sub is not None:
            sub.sub_version = self.clock.wall_ms()
        self._state.share_topic_thresholds(len(self.rebalance_impl.process_queue_table))
        if self._instance is not None:
            await self._instance.heartbeat()

    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        if self._pulls is not None:
            self._pulls.dispatch(requests)

    async def pull_once(self, req: PullRequest) -> float | None:
        """One ``pullMessage`` round: the delay before the next one, None to stop."""
        if self._pulls is None:
            raise ClientStateError("the consumer is not started")
        return await self._pulls.pull_once(req)

    async def _pull_once(self, req: PullRequest) -> float | None:
        return await self.pull_once(req)


def _make_inner_producer(instance: ClientInstance) -> InnerProducer:
    """The instance's producer for re-sending failed messages (group CLIENT_INNER_PRODUCER),
    on the instance's own address, name, timeout and credentials."""
    return Producer(
        CLIENT_INNER_PRODUCER,
        list(instance.namesrv_addrs),
        client_ip=instance.client_ip,
        instance_name=instance.instance_name,
        api_timeout=instance.api_timeout,
        credentials=instance.credentials,
        use_tls=instance.settings.use_tls,
        tls=instance.settings.tls,
    )
