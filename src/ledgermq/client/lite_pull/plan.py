"""What a lite pull consumer reads, said one of two ways, exclusive as in Java:

* ``subscribe(topic, expression)``: the group shares the topic's queues among its members
  (CLUSTERING, through the client instance's rebalance) or every member reads them all
  (BROADCASTING); each rebalance's outcome replaces the topic's assigned queues;
* ``assign(queues)``: exactly these queues, no group coordination; their pulls carry the
  tag expression set before start (``set_sub_expression_for_assign``), else ``"*"``.

This module keeps that choice and the queues it yields; it starts and stops nothing, so
the consumer decides what a change means for its readers and buffer.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ledgermq.client.consumer.common import SUB_ALL, SubscriptionData
from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.consumer.rebalance import PullRequest
from ledgermq.client.errors import MQClientError
from ledgermq.client.lite_pull.assigned_queues import AssignedQueues, QueueState
from ledgermq.clock import Clock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.util.ratelog import limited

__all__ = ["MessageQueueListener", "ReadMode", "ReadPlan"]

# the consumer's logger: a failing listener is the consumer's to report
log = logging.getLogger("ledgermq.client.lite_pull.consumer")

MessageQueueListener = Callable[[str, set[MessageQueue], set[MessageQueue]], Awaitable[None] | None]
"""``fn(topic, mq_all, mq_divided)``: a rebalance changed this consumer's queues of ``topic``."""


class ReadMode(enum.Enum):
    """How the application said what to read; NONE until it used either way, which then
    excludes the other."""

    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


class ReadPlan:
    """Subscriptions or assigned queues; see the module docstring."""

    def __init__(self, assigned: AssignedQueues, clock: Clock) -> None:
        """``clock`` stamps the subscriptions' versions."""
        self.assigned = assigned
        self.clock = clock
        self.mode = ReadMode.NONE
        # subscribe mode: topic -> subscription (the rebalance works on this same dict)
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.queue_listener: MessageQueueListener | None = None
        # assign mode: topic -> tag expression (setSubExpressionForAssign)
        self._assign_expressions: dict[str, str] = {}
        self._assign_subscriptions: dict[str, SubscriptionData] = {}
        # subscribe mode: where the rebalance says new queues start, until they are assigned
        self._start_offsets: dict[MessageQueue, tuple[ProcessQueue, int]] = {}

    @property
    def subscribing(self) -> bool:
        return self.mode is ReadMode.SUBSCRIBE

    def _use(self, mode: ReadMode) -> None:
        if self.mode is ReadMode.NONE:
            self.mode = mode
        elif self.mode is not mode:
            raise MQClientError("subscribe and assign are mutually exclusive")

    def subscribe(
        self, topic: str, expression: str, listener: MessageQueueListener | None, *, expression_type: str = "TAG"
    ) -> None:
        sub = SubscriptionData.build(  # validates first
            topic, expression, expression_type=expression_type, sub_version=self.clock.wall_ms()
        )
        self._use(ReadMode.SUBSCRIBE)
        self.subscriptions[topic] = sub
        if listener is not None:
            self.queue_listener = listener

    def unsubscribe(self, topic: str) -> list[QueueState]:
        """Forget the topic; its queues leave the assignment (returned, to be dropped)."""
        self.subscriptions.pop(topic, None)
        return self.assigned.remove_topic(topic)

    def assign(self, queues: set[MessageQueue]) -> tuple[list[QueueState], list[QueueState]]:
        """Replace the assignment: the queues (removed, added)."""
        self._use(ReadMode.ASSIGN)
        return self.assigned.update(queues)

    def set_assign_expression(self, topic: str, expression: str) -> None:
        self._use(ReadMode.ASSIGN)
        self._assign_expressions[topic] = expression

    def subscription(self, topic: str) -> SubscriptionData | None:
        """What a pull of ``topic`` carries; None once the topic is unsubscribed."""
        if self.subscribing:
            return self.subscriptions.get(topic)
        sub = self._assign_subscriptions.get(topic)
        if sub is None:
            sub = SubscriptionData.build(topic, self._assign_expressions.get(topic, SUB_ALL), sub_version=0)
            self._assign_subscriptions[topic] = sub
        return sub

    def announced(self) -> Iterable[SubscriptionData]:
        """The subscriptions the brokers hear of; none in assign mode, which is no member of
        the group's rebalance."""
        return self.subscriptions.values() if self.subscribing else ()

    def topics(self) -> set[str]:
        if self.subscribing:
            return set(self.subscriptions)
        return self.assigned.topics()

    def state_of(self, mq: MessageQueue) -> QueueState:
        state = self.assigned.get(mq)
        if state is None:
            extra = ", may be rebalancing" if self.subscribing else ""
            raise MQClientError(f"the message queue is not in the assigned list{extra}: {mq}")
        return state

    # -- the rebalance's outcome (subscribe mode) -----------------------------------------
    def record_start_offsets(self, requests: Sequence[PullRequest]) -> None:
        """The rebalance computed the start offsets of new queues; the readers start there
        (Java computes them again in the reader, which may skip what arrived in between)."""
        for req in requests:
            self._start_offsets[req.message_queue] = (req.process_queue, req.next_offset)

    def rebalanced(self, topic: str, mine: frozenset[MessageQueue]) -> tuple[list[QueueState], list[QueueState]]:
        """The topic's queues are now ``mine``: the queues (removed, added), the added ones
        starting where the rebalance said."""
        removed, added = self.assigned.update(mine, topic)
        for state in added:
            start = self._start_offsets.pop(state.mq, None)
            if start is not None and start[0] is state.pq:
                state.pull_offset = start[1]
        for mq in [mq for mq in self._start_offsets if mq.topic == topic]:
            del self._start_offsets[mq]
        return removed, added

    async def tell_listener(
        self, group: str, topic: str, mq_all: frozenset[MessageQueue], mq_divided: frozenset[MessageQueue]
    ) -> None:
        """Call the user's ``MessageQueueListener``; its failure must not undo the rebalance."""
        listener = self.queue_listener
        if listener is not None:
            try:
                result = listener(topic, set(mq_all), set(mq_divided))
                if inspect.isawaitable(result):
                    await result
            except Exception:
                limited.log(
                    log,
                    logging.ERROR,
                    ("queue-listener", group, topic),
                    "group %s: the message queue listener raised for %s",
                    group,
                    topic,
                    exc_info=True,
                )
