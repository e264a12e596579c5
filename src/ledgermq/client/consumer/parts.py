"""What the push and the lite pull consumer build the same way: the offset store and the
``RebalanceImpl`` they make when they start, and the fire-and-forget tasks they run in
between (a heartbeat after a subscription, a route refresh, an offset fix-up).

The two consumers differ in what they do with a rebalance and how they pull, not in how
these parts are wired; one copy of the wiring keeps them from drifting apart (two copies
of the offset store's choice had drifted before ``offset_store_for`` replaced them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ledgermq.client.consumer.common import ConsumeType, MessageModel, SubscriptionData
from ledgermq.client.consumer.offset_store import OffsetStore, ReadOffsetType, offset_store_for
from ledgermq.client.consumer.rebalance import UNLOCK_DELAY, RebalanceImpl, RebalanceListener, RebalanceSettings
from ledgermq.client.consumer.settings import ConsumerSettings
from ledgermq.client.instance.client_instance import ClientInstance, local_ip
from ledgermq.client.instance.pull_api import PullAPI
from ledgermq.clock import Clock
from ledgermq.util.ratelog import limited

__all__ = ["BackgroundTasks", "ConsumerParts", "load_offset_store", "rebalance_for", "with_client_ip"]

S = TypeVar("S", bound=ConsumerSettings)


def with_client_ip(settings: S) -> S:
    """The settings with this host's address as ``client_ip`` when none was given (Java's
    ``RemotingUtil.getLocalAddress``): looked up once, when the consumer is made."""
    return settings if settings.client_ip else dataclasses.replace(settings, client_ip=local_ip())


@dataclass(frozen=True)
class ConsumerParts:
    """What a consumer has once started, handed to the parts that need it: its client
    instance, its offset store and its rebalance (whose process queues are the queues read)."""

    instance: ClientInstance
    offset_store: OffsetStore
    rebalance: RebalanceImpl

    @property
    def pull_api(self) -> PullAPI:
        return self.instance.pull_api


async def load_offset_store(
    settings: ConsumerSettings, instance: ClientInstance, given: OffsetStore | None, store_dir: str | None
) -> OffsetStore:
    """The user's store, else the one the message model calls for, loaded: a consumer must
    know its committed offsets before its first rebalance computes where to start."""
    store = given or offset_store_for(
        broadcasting=settings.message_model is MessageModel.BROADCASTING,
        broker=instance.pull_api,
        group=settings.group,
        client_ip=instance.client_ip,
        client_id=instance.client_id,
        instance_name=settings.instance_name,
        store_dir=store_dir,
    )
    await store.load()
    return store


def rebalance_for(
    settings: ConsumerSettings,
    instance: ClientInstance,
    store: OffsetStore,
    listener: RebalanceListener,
    *,
    consume_type: ConsumeType,
    read_type: ReadOffsetType,
    subscriptions: dict[str, SubscriptionData],
    clock: Clock,
    unlock_delay: float = UNLOCK_DELAY,
) -> RebalanceImpl:
    """The consumer's rebalance, sharing ``subscriptions`` (the consumer's own dict, so a
    later ``subscribe`` is seen by the next round). Only how offsets are read and what the
    brokers are told the consumer is differ between the two kinds."""
    return RebalanceImpl(
        RebalanceSettings(
            group=settings.group,
            client_id=instance.client_id,
            message_model=settings.message_model,
            allocate_strategy=settings.allocate_strategy,
            consume_from_where=settings.consume_from_where,
            consume_timestamp=settings.consume_timestamp,
            consume_type=consume_type,
            read_type=read_type,
            unlock_delay=unlock_delay,
        ),
        instance.pull_api,
        store,
        subscriptions,
        listener=listener,
        clock=clock,
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
