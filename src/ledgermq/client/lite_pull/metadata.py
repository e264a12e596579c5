"""Topic queue-change listeners of a lite pull consumer (Java
``registerTopicMessageQueueChangeListener``): the application learns that a topic's
queues changed (a broker added, a topic's queue count raised) without subscribing to it,
for example to ``assign`` the new queues.

The queues are fetched from the name servers when a listener is registered (or at start),
then every ``topic_metadata_check_interval`` (the first time after at most 10 s); a
listener is called only when the set differs from the last one seen.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from ledgermq.client.consumer.parts import BackgroundTasks
from ledgermq.client.errors import MQClientError
from ledgermq.client.lite_pull.state import LitePullState
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.util.ratelog import limited

__all__ = ["TOPIC_METADATA_FIRST_CHECK", "TopicMessageQueueChangeListener", "TopicQueueWatcher"]

# the consumer's logger: a listener's failure is reported where the consumer's are
log = logging.getLogger("ledgermq.client.lite_pull.consumer")

TOPIC_METADATA_FIRST_CHECK = 10.0

TopicMessageQueueChangeListener = Callable[[str, set[MessageQueue]], Awaitable[None] | None]
"""``fn(topic, queues)``: the topic's queues changed (checked every ``topic_metadata_check_interval``)."""


class TopicQueueWatcher:
    """The registered listeners and the queues each was last told of."""

    def __init__(self, state: LitePullState, background: BackgroundTasks) -> None:
        self._state = state
        self._background = background
        self._listeners: dict[str, TopicMessageQueueChangeListener] = {}
        self._queues: dict[str, set[MessageQueue]] = {}
        self._task: asyncio.Task[None] | None = None

    def register(self, topic: str, listener: TopicMessageQueueChangeListener) -> None:
        if not topic or listener is None:
            raise MQClientError("the topic or the listener is missing")
        if topic in self._listeners:
            log.warning("group %s: a new queue change listener of %s replaces the old one", self._state.group, topic)
        self._listeners[topic] = listener
        if self._state.running:
            self._spawn_baseline(topic)

    def start(self) -> None:
        """Take the baselines of the listeners registered before start, then check periodically."""
        for topic in list(self._listeners):
            self._spawn_baseline(topic)
        self._task = asyncio.create_task(self._loop(), name=f"lite-pull-metadata {self._state.group}")

    def stop(self) -> asyncio.Task[None] | None:
        """Cancel the periodic check; the caller awaits the task returned."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task

    def _spawn_baseline(self, topic: str) -> None:
        self._background.spawn(partial(self._baseline, topic), f"queues of {topic}")

    async def _baseline(self, topic: str) -> None:
        self._queues[topic] = set(await self._state.started.instance.routes.find_subscribe_queues(topic))

    async def _loop(self) -> None:
        interval = self._state.settings.topic_metadata_check_interval
        await asyncio.sleep(min(TOPIC_METADATA_FIRST_CHECK, interval))
        while True:
            try:
                await self.check()
            except Exception:  # the loop must survive anything
                limited.log(
                    log,
                    logging.ERROR,
                    ("metadata", self._state.group),
                    "group %s: checking the topics' queues failed",
                    self._state.group,
                    exc_info=True,
                )
            await asyncio.sleep(self._state.settings.topic_metadata_check_interval)

    async def check(self) -> None:
        """One round: call the listener of every topic whose queues changed."""
        shared = self._state
        for topic, listener in list(self._listeners.items()):
            try:
                queues = set(await shared.started.instance.routes.find_subscribe_queues(topic, refresh=True))
            except MQClientError as exc:
                limited.persisting(  # normal while the topic is being created
                    log,
                    logging.WARNING,
                    ("metadata", shared.group, topic),
                    "group %s: the queues of %s could not be fetched: %s",
                    shared.group,
                    topic,
                    exc,
                )
                continue
            limited.reset(("metadata", shared.group, topic))
            if queues == self._queues.get(topic):
                continue
            self._queues[topic] = queues
            try:
                result = listener(topic, set(queues))
                if inspect.isawaitable(result):
                    await result
            except Exception:
                limited.log(
                    log,
                    logging.ERROR,
                    ("queue-listener", shared.group, topic),
                    "group %s: the queue change listener of %s raised",
                    shared.group,
                    topic,
                    exc_info=True,
                )
