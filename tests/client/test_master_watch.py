"""Following a moving master (client/master_watch.py, failover.py, send_retry.py) with the
network stubbed: a fake route cache whose master can be moved, and attempts that hang,
refuse or answer as a test says. Everything runs on a virtual-time loop (tests/virtual_time.py):
the watch's clock is the loop's, waits take no real time, and every time a test reads is
what the code under test decided, never how busy the machine was."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ledgermq.client import Message
from ledgermq.client.errors import MasterMovedError, MQBrokerError, MQConnectError, SendFailedError
from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.client.message import SendResult, SendStatus
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.client.producer.master_watch import MasterWatch
from ledgermq.client.producer.outgoing import Outgoing, prepare_message
from ledgermq.client.producer.send_retry import send_to_queue_with_retries, send_with_retries
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import ResponseCode
from ledgermq.util.unique_ids import UniqueIdGenerator
from tests.virtual_time import LoopClock, now, run_virtual

pytestmark = pytest.mark.timeout(30)

TOPIC = "T"
FAST = FailoverSettings(stall_after=0.05, route_poll_interval=0.02, backoff_initial=0.04, backoff_max=0.2)


class FakeRoutes:
    """A route cache whose master moves from ``a`` to ``b`` at the ``move_at``-th lookup."""

    def __init__(self, masters: dict[str, str], move_at: int | None = None, moves: dict[str, str] | None = None):
        self.masters = dict(masters)
        self.move_at = move_at
        self.moves = moves or {}
        self.lookups = 0
        self.lookup_times: list[float] = []  # when each lookup began (virtual seconds)
        self.concurrent = 0
        self.max_concurrent = 0
        self.queues = [MessageQueue(TOPIC, b, q) for b in sorted(masters) for q in range(2)]

    def master_addr(self, broker_name: str) -> str | None:
        return self.masters.get(broker_name)

    def between_masters(self, topic: str) -> bool:
        return not self.masters

    async def update(self, topic: str, *, use_default: bool = False) -> bool:
        self.lookup_times.append(now())
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(0.005)  # a name server round trip
            self.lookups += 1
            if self.move_at is not None and self.lookups >= self.move_at:
                self.masters.update(self.moves)
            return True
        finally:
            self.concurrent -= 1

    async def find_publish_info(self, topic: str) -> TopicPublishInfo | None:
        return TopicPublishInfo(topic, list(self.queues))


def watch_of(routes: FakeRoutes, settings: FailoverSettings = FAST) -> MasterWatch:
    return MasterWatch(routes, settings, CLOCK, settings.route_poll_interval)


CLOCK = LoopClock()


def run(coro: Awaitable[Any]) -> Any:
    return run_virtual(coro)


def outgoing() -> Outgoing:
    return prepare_message(Message(TOPIC, b"x"), UniqueIdGenerator("127.0.0.1"), CLOCK, 1 << 22, 1 << 20, 5)


def ok(mq: MessageQueue) -> SendResult:
    return SendResult(SendStatus.SEND_OK, "id", "off", mq, 7)


class Network:
    """The send kernel with a stubbed transport: ``behaviour[addr]`` says what an attempt on
    that address does ("hang", "refuse" (SERVICE_NOT_AVAILABLE), "reset" or "ok")."""

    def __init__(self, routes: FakeRoutes, watch: MasterWatch, behaviour: dict[str, str]) -> None:
        self.routes = routes
        self.watch = watch
        self.behaviour = behaviour
        self.calls: list[tuple[str, MessageQueue, float]] = []
        self.cancelled = 0

    async def _call(self, addr: str, mq: MessageQueue) -> SendResult:
        what = self.behaviour[addr]
        if what == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if what == "refuse":
            raise MQBrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "not the DLedger leader", addr)
        if what == "reset":
            raise MQConnectError(f"{addr} closed the connection", addr)
        return ok(mq)

    async def attempt(self, out: Outgoing, mq: MessageQueue, timeout: float, oneway: bool) -> SendResult | None:
        addr = self.routes.master_addr(mq.broker_name)
        assert addr is not None
        self.calls.append((addr, mq, now()))
        return await self.watch.watch(self._timed(addr, mq, timeout), mq.topic, mq.broker_name, addr)

    async def _timed(self, addr: str, mq: MessageQueue, timeout: float) -> SendResult:
        try:
            async with asyncio.timeout(timeout):
                return await self._call(addr, mq)
        except TimeoutError:
            raise MQConnectError(f"no answer from {addr}", addr, timeout=True) from None


# -- settings ---------------------------------------------------------------------------------
def test_backoff_doubles_to_its_cap_and_leaves_half_the_time() -> None:
    s = FailoverSettings(backoff_initial=0.2, backoff_max=1.0)
    assert [s.backoff(n, 10.0) for n in range(4)] == [0.2, 0.4, 0.8, 1.0]
    assert s.backoff(3, 0.5) == 0.25
    assert FailoverSettings(enabled=False).backoff(0, 10.0) == 0.0
    with pytest.raises(ValueError):
        FailoverSettings(stall_after=0)
    with pytest.raises(ValueError):
        FailoverSettings(backoff_initial=2.0, backoff_max=1.0)


# -- the watch --------------------------------------------------------------------------------
def test_a_stalled_attempt_is_abandoned_once_the_route_names_a_new_master() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=3, moves={"g": "b"})
        watch = watch_of(routes)
        hung = asyncio.get_running_loop().create_future()
        started = now()
        with pytest.raises(MasterMovedError) as info:
            await watch.watch(hung, TOPIC, "g", "a")
        waited = now() - started
        assert info.value.addr == "a" and info.value.new_addr == "b" and info.value.retriable
        assert routes.lookups == 3 and watch.abandoned == 1
        # no lookup before the 50 ms stall, then one every 20 ms; abandoned when the third
        # (5 ms long) named the new master
        assert routes.lookup_times == pytest.approx([0.05, 0.07, 0.09])
        assert waited == pytest.approx(0.09 + 0.005)
        await asyncio.sleep(0)
        assert hung.cancelled()

    run(body())


def test_an_answer_before_the_stall_makes_no_lookup_and_one_after_it_is_kept() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=1, moves={"g": "b"})
        watch = watch_of(routes, FailoverSettings(stall_after=0.2, route_poll_interval=0.05))

        async def answer(after: float) -> str:
            await asyncio.sleep(after)
            return "answer"

        assert await watch.watch(answer(0.01), TOPIC, "g", "a") == "answer"
        assert routes.lookups == 0
        # the route did not move yet when the answer came: kept, and errors pass through
        routes.move_at = None
        assert await watch.watch(answer(0.3), TOPIC, "g", "a") == "answer"
        assert routes.lookups >= 1

        async def fails() -> str:
            await asyncio.sleep(0.25)
            raise MQConnectError("no answer", "a", timeout=True)

        with pytest.raises(MQConnectError) as info:
            await watch.watch(fails(), TOPIC, "g", "a")
        assert not isinstance(info.value, MasterMovedError)

    run(body())


def test_close_stops_a_monitor_sleeping_toward_a_finished_sends_stall() -> None:
    """A producer shut down right after a send must not leave the monitor pending on its loop."""

    async def body() -> None:
        watch = watch_of(FakeRoutes({"g": "a"}), FailoverSettings(stall_after=30.0, route_poll_interval=0.05))

        async def answer() -> str:
            return "answer"

        assert await watch.watch(answer(), TOPIC, "g", "a") == "answer"
        monitor = watch._monitor
        assert monitor is not None and not monitor.done()  # asleep until the stall time, 30 s away
        await watch.close()
        assert monitor.done() and watch._monitor is None

    run(body())


def test_many_stalled_sends_share_one_rate_bounded_lookup_at_a_time() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"})
        watch = watch_of(routes)

        async def stalled() -> None:
            await asyncio.sleep(0.5)

        await asyncio.gather(*(watch.watch(stalled(), TOPIC, "g", "a") for _ in range(50)))
        assert routes.max_concurrent == 1
        # lookups only after the 50 ms stall, at most one per 20 ms, and they go on while
        # the sends stay stalled (until they end at 500 ms)
        times = routes.lookup_times
        assert times[0] == pytest.approx(0.05)
        assert all(later - earlier >= 0.02 - 1e-9 for earlier, later in itertools.pairwise(times)), times
        assert len(times) >= 10 and times[-1] < 0.5

    run(body())


def test_disabled_watch_waits_for_the_attempt_and_looks_nothing_up() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=1, moves={"g": "b"})
        watch = watch_of(routes, FailoverSettings(enabled=False))

        async def slow() -> str:
            await asyncio.sleep(0.1)
            return "answer"

        assert await watch.watch(slow(), TOPIC, "g", "a") == "answer"
        assert routes.lookups == 0

    run(body())


def test_wait_for_new_master_ends_early_on_a_move_else_after_its_delay() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=3, moves={"g": "b"})
        watch = watch_of(routes)
        started = now()
        await watch.wait_for_new_master(TOPIC, "g", "a", 5.0)
        # back as soon as the third lookup (at 40 ms, 5 ms long) named "b", not after 5 s
        assert routes.master_addr("g") == "b" and routes.lookups == 3
        assert now() - started == pytest.approx(0.045)
        started = now()
        await watch.wait_for_new_master(TOPIC, "g", "b", 0.1)
        # no move: the whole delay, looking up every 20 ms meanwhile
        assert now() - started == pytest.approx(0.1, abs=0.006)
        assert routes.lookups > 3

    run(body())


# -- the retry policy -------------------------------------------------------------------------
def _send(
    net: Network, watch: MasterWatch, times_total: int, timeout: float = 2.0
) -> Callable[[], Awaitable[SendResult | None]]:
    info = TopicPublishInfo(TOPIC, list(net.routes.queues))

    async def go() -> SendResult | None:
        return await send_with_retries(
            outgoing(),
            info,
            net.attempt,
            FaultStrategy(False),
            CLOCK,
            times_total,
            timeout,
            now(),
            False,
            False,
            watch,
        )

    return go


def test_a_send_stalled_on_a_stopped_master_goes_to_the_new_one_on_the_same_queue() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=2, moves={"g": "b"})
        watch = watch_of(routes)
        net = Network(routes, watch, {"a": "hang", "b": "ok"})
        # one attempt allowed: the abandoned one does not use it up
        result = await _send(net, watch, times_total=1)()
        assert result is not None and result.status is SendStatus.SEND_OK
        assert [c[0] for c in net.calls] == ["a", "b"]
        assert net.calls[0][1] == net.calls[1][1]  # the same queue
        assert net.cancelled == 1

    run(body())


def test_without_failover_a_stalled_send_waits_its_whole_timeout() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=1, moves={"g": "b"})
        watch = watch_of(routes, FailoverSettings(enabled=False))
        net = Network(routes, watch, {"a": "hang", "b": "ok"})
        started = now()
        with pytest.raises(SendFailedError):
            await _send(net, watch, times_total=1, timeout=0.3)()
        # the whole 0.3 s timeout (and a 5 ms route lookup after it), no earlier
        assert now() - started == pytest.approx(0.3, abs=0.006)
        assert [c[0] for c in net.calls] == ["a"]

    run(body())


def test_retries_after_not_master_answers_back_off_until_the_route_moves() -> None:
    async def body() -> None:
        # the route shows the new master only at the 4th lookup (about 60 ms in)
        routes = FakeRoutes({"g": "a"}, move_at=4, moves={"g": "b"})
        watch = watch_of(routes)
        net = Network(routes, watch, {"a": "refuse", "b": "ok"})
        result = await _send(net, watch, times_total=3)()
        assert result is not None and result.status is SendStatus.SEND_OK
        addrs = [c[0] for c in net.calls]
        assert addrs[-1] == "b" and len(addrs) <= 3
        gaps = [later[2] - earlier[2] for earlier, later in zip(net.calls, net.calls[1:], strict=False)]
        assert all(g >= 0.015 for g in gaps), gaps  # not within milliseconds

    run(body())


def test_without_failover_not_master_answers_spend_the_retries_at_once() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=50, moves={"g": "b"})
        watch = MasterWatch(routes, FailoverSettings(enabled=False), CLOCK, 0.3)
        net = Network(routes, watch, {"a": "refuse", "b": "ok"})
        started = now()
        with pytest.raises(SendFailedError) as info:
            await _send(net, watch, times_total=3)()
        # three attempts with no back-off between them (one 5 ms route lookup in all)
        assert info.value.attempts == 3 and now() - started < 0.01
        gaps = [later[2] - earlier[2] for earlier, later in zip(net.calls, net.calls[1:], strict=False)]
        assert all(g < 0.01 for g in gaps), gaps

    run(body())


def test_a_retry_that_can_go_to_another_group_goes_at_once() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g1": "a", "g2": "c"})
        watch = watch_of(routes, FailoverSettings(backoff_initial=1.0, backoff_max=1.0))
        net = Network(routes, watch, {"a": "reset", "c": "ok"})
        started = now()
        for _ in range(4):
            result = await _send(net, watch, times_total=3)()
            assert result is not None and result.queue.broker_name == "g2"
        # none of the four sends waited out the 1 s back-off (one 5 ms lookup in all)
        assert now() - started < 0.01

    run(body())


def test_an_unreachable_master_is_backed_off_and_the_send_fails_within_its_timeout() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"})
        watch = watch_of(routes)
        net = Network(routes, watch, {"a": "reset"})
        started = now()
        with pytest.raises(SendFailedError) as info:
            await _send(net, watch, times_total=3, timeout=2.0)()
        elapsed = now() - started
        assert info.value.attempts == 3
        # two back-offs, 40 and then 80 ms (each after a 5 ms lookup), and given up with the
        # third failure, long before the 2 s timeout
        first, second, third = (c[2] for c in net.calls)
        assert second - first >= 0.04 and third - second >= 0.08
        assert elapsed == pytest.approx(third - first) and elapsed < 0.2

    run(body())


def test_a_queue_chosen_by_the_caller_keeps_its_queue_across_a_move() -> None:
    async def body() -> None:
        routes = FakeRoutes({"g": "a"}, move_at=2, moves={"g": "b"})
        watch = watch_of(routes)
        net = Network(routes, watch, {"a": "hang", "b": "ok"})
        queue = MessageQueue(TOPIC, "g", 1)
        result = await send_to_queue_with_retries(
            outgoing(), queue, net.attempt, FaultStrategy(False), CLOCK, 0, now(), 2.0, watch
        )
        assert result.queue == queue and [(c[0], c[1]) for c in net.calls] == [("a", queue), ("b", queue)]

    run(body())


def test_wait_for_writable_returns_once_the_route_names_a_master() -> None:
    async def body() -> None:
        routes = FakeRoutes({}, move_at=3, moves={"g": "b"})
        watch = watch_of(routes)
        started = now()
        await watch.wait_for_writable(TOPIC, 5.0)
        # back as soon as the third lookup (at 40 ms, 5 ms long) named a master
        assert routes.lookups == 3 and now() - started == pytest.approx(0.045)
        routes.masters.clear()
        routes.move_at = None
        started = now()
        await watch.wait_for_writable(TOPIC, 0.1)  # none comes: back after the delay
        assert now() - started == pytest.approx(0.1, abs=0.006)

    run(body())
