"""The four checked flows of a soak: ordered, delayed, transactional and filtered.

* **ordered**: orderly sends of 16 "orders", each order's steps to one queue (order id
  modulo the queues); an orderly consumer checks that within an order no acknowledged
  step arrives for the first time after a later acknowledged step (a replay of steps
  already seen is a duplicate, which at-least-once allows);
* **delayed**: delay levels 1-3 (1 s, 5 s, 10 s by default); each message must arrive,
  and not before its send began plus its delay (less ``EARLY_TOLERANCE_S``);
* **transactional**: half messages whose local transaction commits (60 %), rolls back
  (25 %) or answers UNKNOW (15 %, committed at the broker's check-back); committed ones
  must arrive, rolled-back ones (and halves the producer abandoned) never;
* **filtered**: messages with a tag A/B/C and properties ``region`` and ``amount``; a tag
  consumer (``A || B``) and an SQL92 consumer (``region IN ('eu', 'us') AND amount > 50``)
  must each get exactly their matches: every acknowledged match, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ledgermq.chaos.soak.flow import Flow, Receiver, key_of
from ledgermq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    LocalTransactionState,
    Message,
    MessageQueue,
    Producer,
    SendStatus,
    TransactionProducer,
)
from ledgermq.protocol.message import MessageRecord

ORDERS = 16
DELAY_S = {1: 1.0, 2: 5.0, 3: 10.0}  # the default messageDelayLevel's first three levels
EARLY_TOLERANCE_S = 0.5
TAG_EXPRESSION = "A || B"
SQL_EXPRESSION = "region IN ('eu', 'us') AND amount > 50"
FILTER_TOPIC = "SoakFiltered"


def _body(key: str) -> bytes:
    return f"{key};".encode() + b"x" * 96


class _ProducerFlow(Flow):
    producer: Producer | None = None

    async def start_producer(self) -> None:
        self.producer = Producer(f"soak-{self.name}-producer", self.namesrv, send_timeout=self.send_timeout)
        await self.producer.start()

    async def stop_producer(self) -> None:
        if self.producer is not None:
            await self.producer.shutdown()


class OrderedFlow(_ProducerFlow):
    name = "ordered"
    topic = "SoakOrdered"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps = [0] * ORDERS
        self.acked_steps: set[str] = set()
        self.highest: dict[int, int] = {}  # order -> the highest acknowledged step seen
        self.receiver = Receiver("orderly consumer")
        self.receivers = [self.receiver]

    async def start_consumers(self) -> None:
        await self.consumer("soak-ordered", "*", self._on_messages, orderly=True)

    def _on_messages(self, msgs: list[MessageRecord], _ctx: Any) -> ConsumeOrderlyStatus:
        for m in msgs:
            key = key_of(m)
            first = self.receiver.arrived(key)
            if not first or key not in self.acked_steps:
                continue
            _, order, step = key.split("-")
            o, s = int(order), int(step)
            top = self.highest.get(o, -1)
            if s < top:
                self.problem("order", f"order {o}: step {s} first arrived after step {top} (queue {m.queue_id})")
            self.highest[o] = max(top, s)
        return ConsumeOrderlyStatus.SUCCESS

    async def send_one(self, n: int) -> bool:
        assert self.producer is not None
        order = n % ORDERS
        step = self.steps[order]
        self.steps[order] += 1
        key = f"ordered-{order}-{step}"

        def by_order(queues: Sequence[MessageQueue], _msg: Any, arg: Any) -> MessageQueue:
            return queues[int(arg) % len(queues)]

        result = await self.producer.send_orderly(Message(self.topic, _body(key), keys=key), by_order, order)
        if result.status is SendStatus.SEND_OK:
            self.acked_steps.add(key)
            self.receiver.expected.add(key)
            return True
        return False


class DelayedFlow(_ProducerFlow):
    name = "delayed"
    topic = "SoakDelayed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.due: dict[str, float] = {}  # key -> the earliest time it may arrive (time.monotonic())
        self.lateness: list[float] = []
        self.receiver = Receiver("consumer")
        self.receivers = [self.receiver]

    async def start_consumers(self) -> None:
        await self.consumer("soak-delayed", "*", self._on_messages)

    def _on_messages(self, msgs: list[MessageRecord], _ctx: Any) -> ConsumeConcurrentlyStatus:
        now = time.monotonic()
        for m in msgs:
            key = key_of(m)
            if self.receiver.arrived(key) and key in self.due:
                early = self.due[key] - EARLY_TOLERANCE_S - now
                if early > 0:
                    self.problem("early", f"{key}: {early + EARLY_TOLERANCE_S:.2f}s before its delay was up")
                self.lateness.append(max(0.0, now - self.due[key]))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def send_one(self, n: int) -> bool:
        assert self.producer is not None
        level = self.rng.choice(tuple(DELAY_S))
        key = f"delayed-{n}"
        started = time.monotonic()
        result = await self.producer.send(Message(self.topic, _body(key), keys=key, delay_level=level))
        if result.status is SendStatus.SEND_OK:
            self.due[key] = started + DELAY_S[level]
            self.receiver.expected.add(key)
            return True
        return False

    def result(self) -> dict[str, Any]:
        out = super().result()
        late = sorted(self.lateness)
        out["lateness_s"] = {
            "median": round(late[len(late) // 2], 3) if late else 0.0,
            "max": round(late[-1], 3) if late else 0.0,
        }
        return out


class TransactionalFlow(Flow):
    name = "transactional"
    topic = "SoakTransactional"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decisions: dict[str, LocalTransactionState] = {}
        self.producer: TransactionProducer | None = None
        self.receiver = Receiver("consumer")
        self.receivers = [self.receiver]
        self.outcomes: dict[str, int] = {"commit": 0, "rollback": 0, "unknown_then_commit": 0}

    async def start_consumers(self) -> None:
        await self.consumer("soak-transactional", "*", self._on_messages)

    def _on_messages(self, msgs: list[MessageRecord], _ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            self.receiver.arrived(key_of(m))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _check(self, record: MessageRecord) -> LocalTransactionState:
        """The broker's check-back: UNKNOW ones commit now; anything not decided rolls back."""
        state = self.decisions.get(key_of(record), LocalTransactionState.ROLLBACK_MESSAGE)
        return LocalTransactionState.COMMIT_MESSAGE if state is LocalTransactionState.UNKNOW else state

    async def start_producer(self) -> None:
        self.producer = TransactionProducer(
            "soak-transactional-producer", self.namesrv, check_listener=self._check, send_timeout=self.send_timeout
        )
        await self.producer.start()

    async def stop_producer(self) -> None:
        if self.producer is not None:
            await self.producer.shutdown()

    async def send_one(self, n: int) -> bool:
        assert self.producer is not None
        key = f"transactional-{n}"
        draw = self.rng.random()
        state = (
            LocalTransactionState.COMMIT_MESSAGE
            if draw < 0.6
            else LocalTransactionState.ROLLBACK_MESSAGE
            if draw < 0.85
            else LocalTransactionState.UNKNOW
        )
        self.receiver.forbidden.add(key)  # until its half is acknowledged and committed

        def local(_msg: Message, _arg: Any) -> LocalTransactionState:
            self.decisions[key] = state
            return state

        msg = Message(self.topic, _body(key), keys=key)
        result = await self.producer.send_message_in_transaction(msg, executor=local)
        if result.status is not SendStatus.SEND_OK:
            self.decisions[key] = LocalTransactionState.ROLLBACK_MESSAGE  # the producer rolled it back
            return False
        if state is LocalTransactionState.ROLLBACK_MESSAGE:
            self.outcomes["rollback"] += 1
        else:
            self.outcomes["commit" if state is LocalTransactionState.COMMIT_MESSAGE else "unknown_then_commit"] += 1
            self.receiver.forbidden.discard(key)
            self.receiver.expected.add(key)
        return True

    def result(self) -> dict[str, Any]:
        return super().result() | {"outcomes": dict(self.outcomes)}


class FilteredFlow(_ProducerFlow):
    name = "filtered"
    topic = FILTER_TOPIC

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.by_tag = Receiver(f"tag {TAG_EXPRESSION}")
        self.by_sql = Receiver(f"sql92 {SQL_EXPRESSION}")
        self.receivers = [self.by_tag, self.by_sql]

    async def start_consumers(self) -> None:
        await self.consumer("soak-filtered-tag", TAG_EXPRESSION, self._receive(self.by_tag))
        await self.consumer("soak-filtered-sql", SQL_EXPRESSION, self._receive(self.by_sql), expression_type="SQL92")

    @staticmethod
    def _receive(receiver: Receiver) -> Any:
        def on_messages(msgs: list[MessageRecord], _ctx: Any) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                receiver.arrived(key_of(m))
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        return on_messages

    async def send_one(self, n: int) -> bool:
        assert self.producer is not None
        key = f"filtered-{n}"
        tag = self.rng.choice("ABC")
        region = self.rng.choice(("eu", "us", "ap"))
        amount = self.rng.randint(0, 100)
        tag_match = tag in ("A", "B")
        sql_match = region in ("eu", "us") and amount > 50
        # What must never arrive is known before the send: an unacknowledged copy may be stored too.
        for receiver, match in ((self.by_tag, tag_match), (self.by_sql, sql_match)):
            if not match:
                receiver.forbidden.add(key)
        msg = Message(self.topic, _body(key), tags=tag, keys=key, properties={"region": region, "amount": str(amount)})
        result = await self.producer.send(msg)
        if result.status is not SendStatus.SEND_OK:
            return False
        for receiver, match in ((self.by_tag, tag_match), (self.by_sql, sql_match)):
            if match:
                receiver.expected.add(key)
        return True


FLOWS: tuple[type[Flow], ...] = (OrderedFlow, DelayedFlow, TransactionalFlow, FilteredFlow)
