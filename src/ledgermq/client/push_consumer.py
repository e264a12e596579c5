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
  long-polling pull loop (an asyncio task: the broker holds an empty pull for up to 15 s),
  which stops pulling while the queue's cache holds more than ``pull_threshold_for_queue``
  messages or ``pull_threshold_size_for_queue`` MiB (checking again every 50 ms);
* pulled messages go to the consume service (concurrently or orderly, chosen by the
  listener registered), which acknowledges by moving the queue's offset in the offset
  store; offsets reach the broker every ``persist_consumer_offset_interval`` seconds, on
  every pull to the master (the commit-offset flag), and at shutdown;
* CLUSTERING groups subscribe their retry topic ``%RETRY%group`` as well, and messages
  coming back from it get their original topic before the listener sees them;
  BROADCASTING consumers keep their offsets in a local file and never send messages back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.client.allocate import AllocateMessageQueueAveragely, AllocateStrategy
from ledgermq.client.consume_service import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    ConsumeMessageService,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    Listener,
)
from ledgermq.client.consumer_common import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
    consumer_data,
    parse_consume_timestamp,
    retry_topic,
)
from ledgermq.client.errors import ClientStateError, MQBrokerError, MQClientError
from ledgermq.client.instance import ClientInstance, local_ip
from ledgermq.client.offset_store import OffsetStore, ReadOffsetType, offset_store_for
from ledgermq.client.process_queue import ProcessQueue
from ledgermq.client.producer import Producer
from ledgermq.client.pull_api import PullAPI, PullStatus
from ledgermq.client.rebalance import PullRequest, RebalanceImpl
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import LedgerError
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient, mq_table
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records

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

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
MIB = 1024 * 1024
PULL_DELAY_WHEN_SUSPENDED = 1.0
PULL_DELAY_WHEN_BROKER_FLOW_CONTROL = 0.02
CLIENT_VERSION = "V4_9_7"


class _Stats:
    """Per-topic pull and consume rates over the last minute (``ConsumerStatsManager``, coarse)."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self._events: dict[str, deque[tuple[float, str, float]]] = {}
        self.failed_total: dict[str, int] = {}

    def _add(self, topic: str, kind: str, value: float) -> None:
        q = self._events.setdefault(topic, deque())
        now = time.monotonic()
        q.append((now, kind, value))
        while q and now - q[0][0] > self.WINDOW:
            q.popleft()

    def pulled(self, topic: str, rt_ms: float, count: int) -> None:
        self._add(topic, "pullRT", rt_ms)
        self._add(topic, "pullTPS", count)

    def consumed(self, topic: str, ok: int, failed: int) -> None:
        if ok:
            self._add(topic, "consumeOKTPS", ok)
        if failed:
            self._add(topic, "consumeFailedTPS", failed)
            self.failed_total[topic] = self.failed_total.get(topic, 0) + failed

    def status(self, topic: str) -> dict[str, Any]:
        now = time.monotonic()
        events = [e for e in self._events.get(topic, ()) if now - e[0] <= self.WINDOW]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _, kind, value in events:
            sums[kind] = sums.get(kind, 0.0) + value
            counts[kind] = counts.get(kind, 0) + 1
        return {
            "consumeFailedMsgs": self.failed_total.get(topic, 0),
            "consumeFailedTPS": sums.get("consumeFailedTPS", 0.0) / self.WINDOW,
            "consumeOKTPS": sums.get("consumeOKTPS", 0.0) / self.WINDOW,
            "consumeRT": 0.0,
            "pullRT": sums.get("pullRT", 0.0) / counts["pullRT"] if counts.get("pullRT") else 0.0,
            "pullTPS": sums.get("pullTPS", 0.0) / self.WINDOW,
        }


class _InnerProducers:
    """One producer per client instance for re-sending failed messages to the retry topic
    (Java's ``CLIENT_INNER_PRODUCER``), shared by the consumers of that instance."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[Producer, int]] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # one per instance (so per event loop)

    async def acquire(self, instance: ClientInstance, namesrv_addrs: Sequence[str]) -> Producer:
        key = id(instance)
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._table.get(key)
            if entry is not None:
                self._table[key] = (entry[0], entry[1] + 1)
                return entry[0]
            producer = Producer(
                CLIENT_INNER_PRODUCER,
                list(namesrv_addrs),
                client_ip=instance.client_ip,
                instance_name=instance.instance_name,
                api_timeout=instance.api_timeout,
            )
            await producer.start()
            self._table[key] = (producer, 1)
            return producer

    async def release(self, instance: ClientInstance) -> None:
        key = id(instance)
        entry = self._table.get(key)
        if entry is None:
            return
        if entry[1] > 1:
            self._table[key] = (entry[0], entry[1] - 1)
            return
        del self._table[key]
        self._locks.pop(key, None)
        await entry[0].shutdown()


_INNER_PRODUCERS = _InnerProducers()


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
    ) -> None:
        """Options are Java's (snake case); times in seconds unless the name says millis.
        ``pull_threshold_size_for_queue`` is in MiB; ``consume_timeout`` in minutes;
        ``max_reconsume_times`` -1 means 16 (concurrently) or unlimited (orderly)."""
        group = (group or "").strip()
        if not group:
            raise MQClientError("the consumer group is blank")
        if group == DEFAULT_CONSUMER_GROUP:
            raise MQClientError(f"the consumer group can not be {DEFAULT_CONSUMER_GROUP}; give it a name")
        _check_range("consume_thread_min", consume_thread_min, 1, 1000)
        _check_range("consume_thread_max", consume_thread_max, 1, 1000)
        if consume_thread_min > consume_thread_max:
            raise MQClientError(
                f"consume_thread_min ({consume_thread_min}) > consume_thread_max ({consume_thread_max})"
            )
        _check_range("consume_concurrently_max_span", consume_concurrently_max_span, 1, 65535)
        _check_range("pull_threshold_for_queue", pull_threshold_for_queue, 1, 65535)
        _check_range("pull_threshold_size_for_queue", pull_threshold_size_for_queue, 1, 1024)
        if pull_threshold_for_topic != -1:
            _check_range("pull_threshold_for_topic", pull_threshold_for_topic, 1, 6553500)
        if pull_threshold_size_for_topic != -1:
            _check_range("pull_threshold_size_for_topic", pull_threshold_size_for_topic, 1, 102400)
        _check_range("pull_batch_size", pull_batch_size, 1, 1024)
        _check_range("consume_message_batch_max_size", consume_message_batch_max_size, 1, 1024)
        if pull_interval < 0 or pull_interval > 65.535:
            raise MQClientError("pull_interval must be in [0, 65.535] seconds")
        if consume_timestamp is not None:
            try:
                parse_consume_timestamp(consume_timestamp)
            except ValueError as exc:
                raise MQClientError(str(exc)) from None
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

        self.subscriptions: dict[str, SubscriptionData] = {}
        self.listener: Listener | None = None
        self.orderly = False
        self.paused = False
        self.stats = _Stats()
        self._given_offset_store = offset_store
        self._state = "created"
        self._start_ms = 0
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._rebalance: RebalanceImpl | None = None
        self._service: ConsumeMessageService | None = None
        self._inner_producer: Producer | None = None
        self._inner_producer_lock = asyncio.Lock()  # one reference per consumer, however many ask at once
        self._pull_tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._flow_control_times = 0
        self._shut_down: asyncio.Event | None = None

    # -- configuration -------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", *, expression_type: str = "TAG") -> None:
        """Consume ``topic``'s messages matching ``expression`` ("*" or "tagA || tagB")."""
        if not topic or not topic.strip():
            raise MQClientError("the topic is blank")
        self.subscriptions[topic] = SubscriptionData.build(topic, expression, expression_type=expression_type)
        if self._state == "running" and self._instance is not None:
            self._instance.routes.watch(topic)
            self._spawn(self._instance.heartbeat(), "heartbeat after subscribe")

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
        if self._inner_producer is None:
            async with self._inner_producer_lock:
                if self._inner_producer is None:
                    self._inner_producer = await _INNER_PRODUCERS.acquire(self.instance, self.instance.namesrv_addrs)
        return self._inner_producer

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
        )
        self._instance = instance
        store = self._given_offset_store or offset_store_for(
            broadcasting=self.message_model is MessageModel.BROADCASTING,
            broker=instance.pull_api,
            group=self.group,
            client_ip=instance.client_ip,
            client_id=instance.client_id,
            instance_name=self.instance_name,
            store_dir=self.offset_store_dir,
        )
        await store.load()
        self._offset_store = store
        self._rebalance = RebalanceImpl(
            self.group,
            instance.client_id,
            instance.pull_api,
            store,
            listener=self,
            message_model=self.message_model,
            allocate_strategy=self.allocate_strategy,
            consume_from_where=self.consume_from_where,
            consume_timestamp=self.consume_timestamp,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            read_type=ReadOffsetType.READ_FROM_STORE,
            subscriptions=self.subscriptions,
            clock=self.clock,
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
        tasks = [*self._pull_tasks.values(), *self._tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("group %s: a task failed at shutdown", self.group)
        self._pull_tasks.clear()
        if self._service is not None:
            await self._service.shutdown()
        if persist:
            await self.persist_offsets()
        instance = self._instance
        if instance is not None and instance.consumers.get(self.group) is self:
            await instance.unregister_consumer(self.group)
        if self._rebalance is not None:
            await self._rebalance.close()
        if self._inner_producer is not None and instance is not None:
            self._inner_producer = None
            await _INNER_PRODUCERS.release(instance)
        if instance is not None:
            self._instance = None
            await instance.release()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    def _spawn(self, coro: Any, what: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group %s: %s failed", self.group, what)

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what the client instance calls --------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        return consumer_data(
            self.group,
            ConsumeType.CONSUME_PASSIVELY,
            self.message_model,
            self.consume_from_where,
            list(self.subscriptions.values()),
        )

    def subscribed_topics(self) -> set[str]:
        return set(self.subscriptions)

    async def do_rebalance(self) -> None:
        if self._state != "running" or self.paused or self._rebalance is None:
            return
        await self._rebalance.do_rebalance(self.orderly)
        for pq, task in list(self._pull_tasks.items()):
            if pq.dropped:
                task.cancel()

    async def persist_offsets(self) -> None:
        if self._offset_store is None or self._rebalance is None:
            return
        try:
            await self._offset_store.persist_all(set(self._rebalance.process_queue_table))
        except Exception:
            log.exception("group %s: persisting the consumer offsets failed", self.group)

    def running_info(self) -> dict[str, Any]:
        """``ConsumerRunningInfo``."""
        props = {
            "PROP_CLIENT_VERSION": CLIENT_VERSION,
            "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
            "PROP_CONSUMER_START_TIMESTAMP": str(self._start_ms),
            "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.value,
            "PROP_NAMESERVER_ADDR": ";".join(self._instance.namesrv_addrs) if self._instance else "",
            "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_min),
            "consumerGroup": self.group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "consumeThreadMin": str(self.consume_thread_min),
            "consumeThreadMax": str(self.consume_thread_max),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "pullThresholdSizeForQueue": str(self.pull_threshold_size_for_queue),
            "pullBatchSize": str(self.pull_batch_size),
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "allocateMessageQueueStrategy": self.allocate_strategy.name,
        }
        mq_info: dict[MessageQueue, Any] = {}
        offsets = self._offset_store.clone_offset_table() if self._offset_store is not None else {}
        if self._rebalance is not None:
            for mq, pq in self._rebalance.process_queue_table.items():
                info = pq.info()
                info["commitOffset"] = offsets.get(mq, -1)
                mq_info[mq] = info
        return {
            "jstack": "",
            "mqTable": mq_table(mq_info),
            "properties": props,
            "statusTable": {topic: self.stats.status(topic) for topic in sorted(self.subscriptions)},
            "subscriptionSet": [s.to_json() for s in sorted(self.subscriptions.values(), key=lambda s: s.topic)],
        }

    async def handle_broker_request(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            topic = str(cmd.ext_fields.get("topic") or "")
            table: dict[MessageQueue, int] = {}
            if cmd.body:
                doc = loads_lenient(cmd.body)
                raw = doc.get("offsetTable") if isinstance(doc, dict) else None
                if raw is not None:
                    table = {mq: int(v) for mq, v in decode_mq_table(raw).items()}
            await self.reset_offset(topic, table)
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            topic = str(cmd.ext_fields.get("topic") or "")
            offsets = self.offset_store.clone_offset_table(topic)
            body = fastjson.dumps({"consumerTable": {}, "messageQueueTable": mq_table(offsets)})
            return cmd.response(ResponseCode.SUCCESS, body=body)
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            records = decode_records(cmd.body, inflate=True) if cmd.body else []
            if not records:
                return cmd.response(ResponseCode.SYSTEM_ERROR, "no message in the request body")
            broker_name = str(cmd.ext_fields.get("brokerName") or "")
            records[0].broker_name = broker_name
            result = await self.consume_service.consume_directly(records[0], broker_name)
            return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(result))
        return None

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """The broker's offset reset (``MQClientInstance.resetOffset``): pause, drop and empty
        the queues concerned, wait for running listeners, set the new offsets, resume."""
        rebalance = self.rebalance_impl
        self.suspend()
        try:
            for mq, pq in list(rebalance.process_queue_table.items()):
                if mq.topic == topic and mq in offsets:
                    pq.dropped = True
                    pq.clear()
            await asyncio.sleep(self.reset_offset_wait)
            for mq, pq in list(rebalance.process_queue_table.items()):
                offset = offsets.get(mq)
                if mq.topic != topic or offset is None:
                    continue
                try:
                    self.offset_store.update_offset(mq, offset, increase_only=False)
                    await rebalance.remove_unnecessary_message_queue(mq, pq, self.orderly)
                    if rebalance.process_queue_table.get(mq) is pq:
                        del rebalance.process_queue_table[mq]
                except Exception:
                    log.warning("group %s: resetting the offset of %s failed", self.group, mq, exc_info=True)
            log.info("group %s: offsets of %s reset: %s", self.group, topic, {str(k): v for k, v in offsets.items()})
        finally:
            self.paused = False
        await self.do_rebalance()

    # -- RebalanceListener ---------------------------------------------------------------
    async def message_queue_changed(
        self, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        sub = self.subscriptions.get(topic)
        if sub is not None:
            sub.sub_version = self.clock.wall_ms()
        count = len(self.rebalance_impl.process_queue_table)
        if count:
            if self.pull_threshold_for_topic != -1:
                self.pull_threshold_for_queue = max(1, self.pull_threshold_for_topic // count)
            if self.pull_threshold_size_for_topic != -1:
                self.pull_threshold_size_for_queue = max(1, self.pull_threshold_size_for_topic // count)
        if self._instance is not None:
            await self._instance.heartbeat()

    def dispatch_pull_requests(self, requests: Sequence[PullRequest]) -> None:
        for req in requests:
            old = self._pull_tasks.pop(req.process_queue, None)
            if old is not None:
                old.cancel()
            task = asyncio.get_running_loop().create_task(
                self._pull_loop(req), name=f"pull-{req.message_queue.topic}-{req.message_queue.queue_id}"
            )
            self._pull_tasks[req.process_queue] = task
            task.add_done_callback(functools.partial(self._forget_pull, req.process_queue))
            log.info("group %s: pulling %s from offset %d", self.group, req.message_queue, req.next_offset)

    def _forget_pull(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._pull_tasks.get(pq) is task:
            del self._pull_tasks[pq]

    # -- the pull loop -------------------------------------------------------------------
    async def _pull_loop(self, req: PullRequest) -> None:
        """One queue's pulls until its process queue is dropped or the consumer stops."""
        while self._state in ("running", "starting"):
            try:
                delay = await self.pull_once(req)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group %s: pulling %s failed", self.group, req.message_queue)
                delay = self.pull_delay_when_exception
            if delay is None:
                return
            if delay > 0:
                await asyncio.sleep(delay)

    async def pull_once(self, req: PullRequest) -> float | None:
        """One ``pullMessage`` round: the delay before the next one, None to stop."""
        pq, mq = req.process_queue, req.message_queue
        if pq.dropped:
            log.info("group %s: %s is dropped; its pulls stop", self.group, mq)
            return None
        pq.mark_pulled()
        if self.paused:
            return PULL_DELAY_WHEN_SUSPENDED
        if pq.msg_count > self.pull_threshold_for_queue or pq.msg_size // MIB > self.pull_threshold_size_for_queue:
            self._flow_controlled(mq, pq, "cache")
            return self.flow_control_delay
        if not self.orderly:
            if pq.max_span > self.consume_concurrently_max_span:
                self._flow_controlled(mq, pq, "span")
                return self.flow_control_delay
        elif pq.locked:
            if not req.previously_locked:
                try:
                    offset = await self.rebalance_impl.compute_pull_from_where(mq)
                except Exception as exc:
                    log.error("group %s: the start offset of %s could not be computed: %s", self.group, mq, exc)
                    return self.pull_delay_when_exception
                if offset < 0:
                    return self.pull_delay_when_exception
                if offset < req.next_offset:
                    log.info("group %s: %s locked; starting at the broker's offset %d", self.group, mq, offset)
                req.previously_locked = True
                req.next_offset = offset
        else:
            log.debug("group %s: %s is not locked yet; pulling later", self.group, mq)
            return self.pull_delay_when_exception
        sub = self.subscriptions.get(mq.topic)
        if sub is None:
            log.warning("group %s: no subscription for %s", self.group, mq)
            return self.pull_delay_when_exception

        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            memory = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            commit_offset = max(memory, 0)
        begin = time.monotonic()
        try:
            result = await self.pull_api.pull(
                mq,
                self.group,
                req.next_offset,
                self.pull_batch_size,
                expression=sub.sub_string,
                expression_type=sub.expression_type,
                sub_version=sub.sub_version,
                commit_offset=commit_offset,
                suspend_ms=int(self.broker_suspend_max_time * 1000),
                timeout=self.consumer_timeout_when_suspend,
            )
        except LedgerError as exc:
            if not mq.topic.startswith("%RETRY%"):
                log.warning("group %s: pull of %s failed: %s", self.group, mq, exc)
            if isinstance(exc, MQBrokerError) and exc.code == ResponseCode.FLOW_CONTROL:
                return PULL_DELAY_WHEN_BROKER_FLOW_CONTROL
            return self.pull_delay_when_exception
        if pq.dropped:
            return None

        if result.status is PullStatus.FOUND:
            prev = req.next_offset
            req.next_offset = result.next_begin_offset
            msgs = result.messages
            self.stats.pulled(mq.topic, (time.monotonic() - begin) * 1000, len(msgs))
            if result.next_begin_offset < prev or (msgs and msgs[0].queue_offset < prev):
                log.warning(
                    "group %s: %s answered data before offset %d (next %d)",
                    self.group,
                    mq,
                    prev,
                    result.next_begin_offset,
                )
            if not msgs:
                return 0.0
            dispatch = pq.put_message(msgs)
            self.consume_service.submit(msgs, pq, mq, dispatch)
            return self.pull_interval
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset: nothing in flight, the offset may move on
                self.offset_store.update_offset(mq, req.next_offset, increase_only=True)
            return 0.0
        # OFFSET_ILLEGAL: stop here, record where to restart, let the rebalance re-add the queue
        log.warning(
            "group %s: offset %d of %s is illegal; restarting at %d",
            self.group,
            req.next_offset,
            mq,
            result.next_begin_offset,
        )
        req.next_offset = result.next_begin_offset
        pq.dropped = True
        self._spawn(self._fix_offset_later(mq, pq, req.next_offset), f"fixing the offset of {mq}")
        return None

    async def _fix_offset_later(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        await asyncio.sleep(self.offset_illegal_fix_delay)
        if self.rebalance_impl.process_queue_table.get(mq) is not pq:
            # Rebalanced away meanwhile (unlike Java, which commits anyway): the new owner's
            # progress must not be overwritten, nor a queue taken back since dropped again.
            log.info("group %s: %s is no longer ours; its illegal offset is left to its owner", self.group, mq)
            return
        self.offset_store.update_offset(mq, offset, increase_only=False)
        await self.offset_store.persist(mq)
        await self.rebalance_impl.remove_process_queue(mq, self.orderly)
        log.warning("group %s: offset of %s fixed to %d", self.group, mq, offset)

    def _flow_controlled(self, mq: MessageQueue, pq: ProcessQueue, why: str) -> None:
        if self._flow_control_times % 1000 == 0:
            log.warning(
                "group %s: flow control (%s) on %s: %d messages, %d MiB cached, span %d (%d times)",
                self.group,
                why,
                mq,
                pq.msg_count,
                pq.msg_size // MIB,
                pq.max_span,
                self._flow_control_times,
            )
        self._flow_control_times += 1


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise MQClientError(f"{name} is out of range [{low}, {high}]: {value}")
