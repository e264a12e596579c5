"""What the push and the lite pull consumer build the same way: the offset store and the
``RebalanceImpl`` they make when they start, and the fire-and-forget tasks they run in
between (a heartbeat after a subscription, a route refresh, an offset fix-up).

The two consumers differ in what they do with a rebalance and how they pull, not in how
these parts are wired; one copy of the wiring keeps them from drifting apart (two copies
of the offset store's choice had drifted before ``offset_store_for`` replaced them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ledgermq.client.consumer.allocate import AllocateStrategy
from ledgermq.client.consumer.common import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from ledgermq.client.consumer.offset_store import OffsetStore, ReadOffsetType, offset_store_for
from ledgermq.client.consumer.rebalance import UNLOCK_DELAY, RebalanceImpl, RebalanceListener
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.clock import Clock
from ledgermq.util.ratelog import limited

__all__ = ["BackgroundTasks", "ConsumerSettings", "load_offset_store", "rebalance_for"]


class ConsumerSettings(RebalanceListener, Protocol):
    """The settings both consumers keep under the same names, read-only here; the consumer
    is also the listener of its own rebalance."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def allocate_strategy(self) -> AllocateStrategy: ...

    @property
    def consume_from_where(self) -> ConsumeFromWhere: ...

    @property
    def consume_timestamp(self) -> str | int | None: ...

    @property
    def instance_name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...


async def load_offset_store(
    consumer: ConsumerSettings, instance: ClientInstance, given: OffsetStore | None, store_dir: str | None
) -> OffsetStore:
    """The user's store, else the one the message model calls for, loaded: a consumer must
    know its committed offsets before its first rebalance computes where to start."""
    store = given or offset_store_for(
        broadcasting=consumer.message_model is MessageModel.BROADCASTING,
        broker=instance.pull_api,
        group=consumer.group,
        client_ip=instance.client_ip,
        client_id=instance.client_id,
        instance_name=consumer.instance_name,
        store_dir=store_dir,
    )
    await store.load()
    return store


def rebalance_for(
    consumer: ConsumerSettings,
    instance: ClientInstance,
    store: OffsetStore,
    *,
    consume_type: ConsumeType,
    read_type: ReadOffsetType,
    subscriptions: dict[str, SubscriptionData],
    unlock_delay: float = UNLOCK_DELAY,
) -> RebalanceImpl:
    """The consumer's rebalance, sharing ``subscriptions`` (the consumer's own dict, so a
    later ``subscribe`` is seen by the next round). Only how offsets are read and what the
    brokers are told the consumer is differ between the two kinds."""
    return RebalanceImpl(
        consumer.group,
        instance.client_id,
        instance.pull_api,
        store,
        listener=consumer,
        message_model=consumer.message_model,
        allocate_strategy=consumer.allocate_strategy,
        consume_from_where=consumer.consume_from_where,
        consume_timestamp=consumer.consume_timestamp,
        consume_type=consume_type,
        read_type=read_type,
        subscriptions=subscriptions,
        clock=consumer.clock,
        unlock_delay=unlock_delay,
    )


class BackgroundTasks:
    """Work a consumer starts and does not wait for. A failure is logged, never lost and
    never fatal; shutdown cancels what is still running, so nothing outlives the consumer.
    Failures are logged to the consumer's own logger, where its users look for them."""

    def __init__(self, group: str, logger: logging.Logger, name_prefix: str | None = None) -> None:
        self.group = group
        self.log = logger
        self.name_prefix = name_prefix
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, make: Callable[[], Awaitable[Any]], what: str) -> None:
        """Run ``make()`` in a task. A factory rather than a coroutine, so that nothing is
        created (and left un-awaited) when the task is cancelled before it starts."""

        async def guarded() -> None:
            try:
                await make()
            except asyncio.CancelledError:
                raise
            except Exception:
                limited.log(
                    self.log,
                    logging.ERROR,
                    ("task", self.group, what),
                    "group %s: %s failed",
                    self.group,
                    what,
                    exc_info=True,
                )

        name = None if self.name_prefix is None else f"{self.name_prefix} {what}"
        task = asyncio.get_running_loop().create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every task still running and forget them; the caller awaits the list."""
        tasks = list(self._tasks)
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        return tasks
