"""Async sends against a real name server and real brokers in this process (127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgermq.broker.app import BrokerApp
from ledgermq.client import Message, MessageQueue, MQBrokerError, Producer, SendResult, SendStatus
from ledgermq.client.errors import ClientStateError, MessageInvalidError, MQConnectError, SendFailedError
from ledgermq.client.producer.selector import select_by_hash
from ledgermq.client.producer.send_budget import AsyncBackPressureError, AsyncSendBudget
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from tests.client.cluster import Cluster, running

pytestmark = pytest.mark.timeout(60)


def run(root: Path, body: Callable[[Cluster], Awaitable[None]], names: tuple[str, ...] = ("broker-a",),
        **store: Any) -> None:  # fmt: skip
    async def main() -> None:
        async with running(root, names, **store) as cluster:
            await asyncio.wait_for(body(cluster), 40)

    asyncio.run(main())


def producer(cluster: Cluster, **kw: Any) -> Producer:
    kw.setdefault("client_ip", "127.0.0.1")
    return Producer("pg-async", cluster.ns_addr, **kw)


class Recorder:
    """A SendCallback that counts every call."""

    def __init__(self) -> None:
        self.results: list[SendResult] = []
        self.errors: list[Exception] = []
        self.done = asyncio.Event()

    def on_success(self, result: SendResult) -> None:
        self.results.append(result)
        self.done.set()

    def on_exception(self, exc: Exception) -> None:
        self.errors.append(exc)
        self.done.set()


def slow_sends(app: BrokerApp, delay: float) -> None:
    """Make the broker answer SEND_MESSAGE_V2 ``delay`` seconds late."""
    inner = app.server.processors[RequestCode.SEND_MESSAGE_V2]

    async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        await asyncio.sleep(delay)
        outcome = inner(ctx, cmd)  # an answer now, or an awaitable of one (net/server.py)
        return outcome if outcome is None or isinstance(outcome, RemotingCommand) else await outcome

    app.server.register(RequestCode.SEND_MESSAGE_V2, slow)


class AttemptSpy:
    def __init__(self, p: Producer) -> None:
        self.brokers: list[str] = []
        inner = p._send_kernel

        async def spy(out: Any, mq: MessageQueue, timeout: float, oneway: bool) -> Any:
            self.brokers.append(mq.broker_name)
            return await inner(out, mq, timeout, oneway)

        p._send_kernel = spy  # type: ignore[method-assign]
        # a send's first attempt usually goes out without _send_kernel (client/producer/fast_send.py)
        start_invoke = p.remoting.start_invoke

        def spy_fast(addr: str, cmd: Any, timeout: float, on_done: Any) -> Any:
            started = start_invoke(addr, cmd, timeout, on_done)
            if started is not None:
                self.brokers.append(cmd.ext_fields["n"])
            return started

        p.remoting.start_invoke = spy_fast  # type: ignore[method-assign]


def test_callbacks_run_once_sync_async_and_plain_callables(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            rec = Recorder()
            fut = p.send_async(Message("AsyncT", b"one", tags="a"), rec)
            result = await fut
            assert rec.results == [result] and rec.errors == []
            assert result.status is SendStatus.SEND_OK
            stored = await cluster.pull_until("broker-a", "AsyncT", result.queue.queue_id, 1)
            assert stored[result.queue_offset].body == b"one"

            seen: list[object] = []

            async def async_ok(r: SendResult) -> None:
                await asyncio.sleep(0)
                seen.append(r)

            r2 = await p.send_async(Message("AsyncT", b"two"), on_success=async_ok, on_exception=seen.append)
            assert seen == [r2]  # the callback finished before the future did

            # no callback at all: just the future
            r3 = await p.send_async(Message("AsyncT", b"three"))
            assert r3.msg_id not in (result.msg_id, r2.msg_id)

            with pytest.raises(TypeError):
                p.send_async(Message("AsyncT", b"x"), rec, on_success=seen.append)
            with pytest.raises(TypeError):
                p.send_async(Message("AsyncT", b"x"), object())  # type: ignore[arg-type]
            await asyncio.sleep(0.05)
            assert len(rec.results) == 1 and len(seen) == 1  # nothing ran twice

    run(tmp_path, body)


def test_local_errors_and_callback_errors_reach_on_exception_or_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(cluster: Cluster) -> None:
        p = producer(cluster)
        rec = Recorder()
        with pytest.raises(ClientStateError):
            await p.send_async(Message("AsyncE", b"x"), rec)  # not started
        assert len(rec.errors) == 1 and isinstance(rec.errors[0], ClientStateError)
        async with p:
            rec = Recorder()
            with pytest.raises(MessageInvalidError):
                await p.send_async(Message("bad topic", b"x"), rec)
            assert len(rec.errors) == 1 and rec.results == []

            def boom(_: SendResult) -> None:
                raise RuntimeError("callback bug")

            with caplog.at_level(logging.ERROR, logger="ledgermq.client.producer.producer"):
                result = await p.send_async(Message("AsyncE", b"y"), on_success=boom)
            assert result.status is SendStatus.SEND_OK  # the send stands
            assert any("callback bug" in (r.exc_text or "") for r in caplog.records)

            errors: list[Exception] = []
            fut = p.send_async(Message("AsyncE", b""), on_exception=errors.append)  # empty body
            await asyncio.wait([fut])
            assert isinstance(errors[0], MessageInvalidError) and fut.exception() is errors[0]

    run(tmp_path, body)


def test_batch_queue_and_orderly_async_sends(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            queues = await p.fetch_publish_queues("AsyncO")
            rec = Recorder()
            batch = await p.send_batch_async([Message("AsyncO", f"b{i}".encode()) for i in range(3)], rec)
            assert rec.results == [batch] and len(batch.msg_id.split(",")) == 3
            got = await cluster.pull_until("broker-a", "AsyncO", batch.queue.queue_id, 3)
            assert [r.body for r in got[batch.queue_offset : batch.queue_offset + 3]] == [b"b0", b"b1", b"b2"]

            r1 = await p.send_to_queue_async(Message("AsyncO", b"q"), queues[1])
            assert r1.queue == queues[1]
            expected = select_by_hash(queues, None, "order-7")
            results = [await p.send_orderly_async(Message("AsyncO", f"o{i}".encode()), select_by_hash, "order-7")
                       for i in range(3)]  # fmt: skip
            assert {r.queue for r in results} == {expected}
            assert [r.queue_offset for r in results] == [results[0].queue_offset + i for i in range(3)]
            with pytest.raises(MessageInvalidError):
                await p.send_to_queue_async(Message("AsyncO", b"x"), MessageQueue("Other", "broker-a", 0))

    run(tmp_path, body)


def test_non_retriable_broker_error_is_one_attempt(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, compress_over=10**9, max_message_size=1024 * 1024) as p:
            spy = AttemptSpy(p)
            rec = Recorder()
            with pytest.raises(MQBrokerError) as info:
                await p.send_async(Message("AsyncBig", os.urandom(100 * 1024)), rec)
            assert info.value.code == 13 and spy.brokers == ["broker-a"]
            assert rec.errors == [info.value]

    run(tmp_path, body, max_message_size=64 * 1024)


def test_retries_on_another_broker_when_one_is_stopped(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, send_latency_fault_enable=True) as p:
            for q in await p.fetch_publish_queues("AsyncFail"):
                await p.send_to_queue(Message("AsyncFail", b"warm"), q)
            await cluster.stop_broker("broker-a")
            spy = AttemptSpy(p)
            rec = Recorder()
            futs = [p.send_async(Message("AsyncFail", f"m{i}".encode()), rec) for i in range(8)]
            results = await asyncio.gather(*futs)
            assert {r.queue.broker_name for r in results} == {"broker-b"}
            assert rec.errors == [] and sorted(r.msg_id for r in rec.results) == sorted(r.msg_id for r in results)
            assert "broker-a" in spy.brokers and len(spy.brokers) > len(results)  # retried away from it
            assert not p.fault.is_available("broker-a")  # the fault item was updated

    run(tmp_path, body, names=("broker-a", "broker-b"))


def test_retries_are_bounded_by_retry_times_when_send_async_failed(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, retry_times_when_send_async_failed=1) as p:
            queue = (await p.fetch_publish_queues("AsyncDead"))[0]
            await p.send_to_queue(Message("AsyncDead", b"warm"), queue)
            await cluster.stop_broker("broker-a")
            spy = AttemptSpy(p)
            rec = Recorder()
            with pytest.raises(SendFailedError) as info:
                await p.send_async(Message("AsyncDead", b"lost"), rec)
            assert info.value.attempts == 2 and spy.brokers == ["broker-a"] * 2
            assert rec.errors == [info.value] and isinstance(info.value.last, MQConnectError)
            spy.brokers.clear()
            with pytest.raises(SendFailedError):  # queue-selected: retried on the same queue
                await p.send_to_queue_async(Message("AsyncDead", b"lost"), queue)
            assert spy.brokers == ["broker-a"] * 2

    run(tmp_path, body)


def test_timeout_yields_on_exception(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            await p.send(Message("AsyncSlow", b"warm"))
            slow_sends(cluster.brokers["broker-a"], 6.0)
            rec = Recorder()
            started = time.monotonic()
            fut = p.send_async(Message("AsyncSlow", b"late"), rec, timeout=0.4)
            with pytest.raises(MQConnectError) as info:
                await fut
            # failed by its own 0.4 s timeout (the broker's answer, 6 s later, would be a success)
            assert info.value.timeout
            assert time.monotonic() - started >= 0.4 - 0.01
            await asyncio.sleep(0.1)
            assert rec.errors == [info.value] and rec.results == []  # once

    run(tmp_path, body)


def test_many_concurrent_async_sends_all_succeed(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, send_timeout=20.0) as p:
            await p.send(Message("AsyncMany", b"warm"))
            rec = Recorder()
            peak = 0
            futs = []
            for i in range(2000):
                futs.append(p.send_async(Message("AsyncMany", b"%d" % i), rec))
                peak = max(peak, p.async_inflight)
            results = await asyncio.gather(*futs)
            assert peak == 256  # the default budget; the broker answers SYSTEM_BUSY past 256 per connection
            assert p.async_inflight == 0
            assert all(r.status is SendStatus.SEND_OK for r in results) and rec.errors == []
            assert len(rec.results) == 2000 and len({r.msg_id for r in results}) == 2000
            per_queue = Counter((r.queue.queue_id, r.queue_offset) for r in results)
            assert max(per_queue.values()) == 1  # distinct stored positions

    run(tmp_path, body)


def test_back_pressure_wait_counts_against_the_timeout(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        async with producer(cluster, async_send_max_inflight=2) as p:
            await p.send(Message("AsyncBp", b"warm"))
            # the first two take 2 s at the broker: long past the starved send's 0.2 s and the
            # capacity check after it, however slowly this process gets there
            slow_sends(cluster.brokers["broker-a"], 2.0)
            first = [p.send_async(Message("AsyncBp", b"a"), timeout=20.0) for _ in range(2)]
            assert p.async_inflight == 2
            rec = Recorder()
            starved = p.send_async(Message("AsyncBp", b"b"), rec, timeout=0.2)
            with pytest.raises(AsyncBackPressureError):
                await starved
            assert len(rec.errors) == 1
            assert not await p.wait_for_async_capacity(0.05)
            assert await p.wait_for_async_capacity(20.0)
            queued = p.send_async(Message("AsyncBp", b"c"), timeout=20.0)  # goes out after the first two
            assert all(r.status is SendStatus.SEND_OK for r in await asyncio.gather(*first, queued))
            assert p.async_inflight == 0

    run(tmp_path, body)


def test_shutdown_waits_for_async_sends_in_flight(tmp_path: Path) -> None:
    async def body(cluster: Cluster) -> None:
        p = producer(cluster)
        await p.start()
        await p.send(Message("AsyncShut", b"warm"))
        slow_sends(cluster.brokers["broker-a"], 0.3)
        rec = Recorder()
        futs = [p.send_async(Message("AsyncShut", b"x"), rec) for _ in range(5)]
        await p.shutdown()
        assert all(f.done() for f in futs) and len(rec.results) == 5
        with pytest.raises(ClientStateError):
            await p.send_async(Message("AsyncShut", b"after"))

    run(tmp_path, body)


def test_budget_serves_waiters_in_order_and_lets_a_huge_send_go_alone() -> None:
    async def main() -> None:
        budget = AsyncSendBudget(max_count=2, max_bytes=100)
        assert budget.try_acquire(60)
        assert not budget.try_acquire(60)  # over the bytes
        order: list[str] = []

        async def waiter(name: str, size: int) -> None:
            await budget.acquire(size, 5.0)
            order.append(name)

        tasks = [asyncio.create_task(waiter("big", 60)), asyncio.create_task(waiter("small", 1))]
        await asyncio.sleep(0.01)
        assert order == [] and not budget.try_acquire(1)  # the small one queues behind the big one
        budget.release(60)
        await asyncio.gather(*tasks)
        assert order == ["big", "small"] and budget.count == 2
        budget.release(60)
        budget.release(1)
        assert budget.try_acquire(1000) and budget.bytes == 1000  # alone, over the byte budget
        budget.release(1000)
        with pytest.raises(AsyncBackPressureError):
            budget.try_acquire(1)
            budget.try_acquire(1)
            await budget.acquire(1, 0.01)
        assert not budget._waiters and budget.count == 2

    asyncio.run(main())


def test_finished_sends_leave_no_reference_cycle(tmp_path: Path) -> None:
    """A send that ended is freed by reference counting: nothing of it waits for the cyclic
    collector, which a loop of thousands of sends would otherwise keep busy (the op, its
    future, its attempt's watch entry and the pending request used to hold each other)."""
    import gc

    kinds = {"SendOp", "SendFuture", "PendingCall", "_Attempt", "Outgoing"}

    async def body(cluster: Cluster) -> None:
        async with producer(cluster) as p:
            await p.send(Message("CycleTopic", b"warm"))
            gc.collect()
            gc.disable()
            try:
                for i in range(50):
                    await p.send(Message("CycleTopic", b"s%d" % i))
                futures = [p.send_async(Message("CycleTopic", b"a%d" % i)) for i in range(50)]
                await asyncio.gather(*futures)
                del futures
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                left = Counter(type(o).__name__ for o in gc.garbage if type(o).__name__ in kinds)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
            assert not left, f"sends left for the cyclic collector: {dict(left)}"

    run(tmp_path, body)


def test_a_send_waiting_for_a_slot_is_three_objects_for_the_collector(tmp_path: Path) -> None:
    """A loop that fires thousands of ``send_async`` keeps most of them waiting for a slot,
    and the cyclic collector walks every waiting send again and again: each one is its
    future, its op (its own queue entry) and its prepared message, no more."""
    import gc

    async def body(cluster: Cluster) -> None:
        app = cluster.brokers["broker-a"]
        slow_sends(app, 0.5)
        async with producer(cluster, async_send_max_inflight=1) as p:
            await p.send(Message("WaitTopic", b"warm"))
            msgs = [Message("WaitTopic", b"w%d" % i) for i in range(400)]
            first = p.send_async(Message("WaitTopic", b"first"))  # holds the one slot
            gc.collect()
            gc.disable()
            try:
                before = len(gc.get_objects())
                futures = [p.send_async(m) for m in msgs]
                grown = len(gc.get_objects()) - before
            finally:
                gc.enable()
            assert p.async_budget.count == 1 and len(p.async_budget._waiters) == len(msgs)
            assert grown <= 3 * len(msgs) + 10, f"{grown / len(msgs):.2f} tracked objects per waiting send"
            for fut in (first, *futures):
                fut.cancel()

    run(tmp_path, body)
