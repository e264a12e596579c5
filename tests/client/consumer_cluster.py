"""Helpers for push consumer tests: a bounded runner for async tests, a collector of what
listeners saw, quick consumer settings, and a real-process cluster with short delay levels."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.client.message import Message
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol.message import MessageRecord
from tests.admin.servers import BROKER, START_TIMEOUT, ProcessCluster, ns_route

FAST_DELAYS = " ".join(["1s"] * 18)
"""Every delay level 1 s, so retries come back quickly."""

FAST: dict[str, Any] = dict(
    rebalance_interval=0.3,
    persist_consumer_offset_interval=0.2,
    heartbeat_interval=1.0,
    poll_namesrv_interval=1.0,
    broker_suspend_max_time=1.0,
    pull_delay_when_exception=0.2,
    local_reconsume_delay=0.3,
    lock_interval=0.5,
    unlock_delay=0.5,
    offset_illegal_fix_delay=0.2,
    reset_offset_wait=0.2,
)


def aio(timeout: float = 60.0) -> Callable[[Callable[..., Coroutine[Any, Any, None]]], Callable[..., None]]:
    """Run an async test (which may take pytest fixtures) on a fresh loop, bounded."""

    def wrap(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> None:
            asyncio.run(asyncio.wait_for(fn(*args, **kwargs), timeout))

        return run

    return wrap


@dataclass
class Seen:
    """One delivery a listener saw."""

    who: str
    msg_id: str
    topic: str
    tags: str | None
    body: bytes
    queue_id: int
    queue_offset: int
    reconsume_times: int
    broker_name: str


@dataclass
class Collector:
    """Records every delivery; answers with ``answer`` (a status or a function of the record)."""

    seen: list[Seen] = field(default_factory=list)

    def listener(self, who: str, answer: Any = ConsumeConcurrentlyStatus.CONSUME_SUCCESS) -> Any:
        async def on_messages(msgs: list[MessageRecord], context: Any) -> Any:
            for m in msgs:
                self.seen.append(
                    Seen(
                        who,
                        m.msg_id,
                        m.topic,
                        m.tags,
                        m.body,
                        m.queue_id,
                        m.queue_offset,
                        m.reconsume_times,
                        m.broker_name,
                    )
                )
            return answer(msgs, context) if callable(answer) else answer

        return on_messages

    def ids(self, who: str | None = None) -> Counter[str]:
        return Counter(s.msg_id for s in self.seen if who is None or s.who == who)

    async def wait_ids(self, expected: set[str], who: str | None = None, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not expected <= set(self.ids(who)):
            if time.monotonic() > deadline:
                missing = expected - set(self.ids(who))
                raise AssertionError(f"{len(missing)} of {len(expected)} messages not delivered to {who or 'anyone'}")
            await asyncio.sleep(0.05)


async def wait_until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


async def send_many(producer: Producer, topic: str, n: int, *, tags: str | None = None, prefix: str = "m") -> set[str]:
    """Send ``n`` messages; the UNIQ_KEYs (what consumers see as msg_id)."""
    ids: set[str] = set()
    for i in range(n):
        result = await producer.send(Message(topic, f"{prefix}-{i}".encode(), tags=tags))
        ids.add(result.msg_id)
    return ids


def consumer(group: str, ns_addr: str, **options: Any) -> PushConsumer:
    return PushConsumer(group, ns_addr, **{**FAST, **options})


class DelayCluster(ProcessCluster):
    """``ProcessCluster`` whose broker uses 1 s delay levels."""

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + START_TIMEOUT * 2
        self._spawn(
            ["namesrv", "-p", str(self.ns_port), "--host", "127.0.0.1", "--kv-config", str(self.root / "kv.json")],
            "namesrv.log",
        )
        self._wait_port(self.ns_port, self.procs[-1], deadline)
        conf = self.root / "broker.properties"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    f"brokerName={BROKER}",
                    "brokerId=0",
                    "brokerIP1=127.0.0.1",
                    "listenHost=127.0.0.1",
                    f"listenPort={self.broker_port}",
                    f"namesrvAddr={self.ns_addr}",
                    f"storePathRootDir={self.root / 'store'}",
                    "mappedFileSizeCommitLog=1048576",
                    f"messageDelayLevel={FAST_DELAYS}",
                    "",
                ]
            )
        )
        self._spawn(["broker", "-c", str(conf)], "broker.log")
        self._wait_port(self.broker_port, self.procs[-1], deadline)
        while asyncio.run(ns_route(self.ns_addr, "TBW102")) is None:
            if time.monotonic() > deadline:
                raise AssertionError("the broker did not register in time")
            time.sleep(0.1)


def root_of(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(parents=True, exist_ok=True)
    return path
