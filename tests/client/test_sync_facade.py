"""The blocking facade against a name server and a broker running on another thread's loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminResponseError
from ledgermq.admin.sync import SyncAdmin
from ledgermq.client import Message, MessageQueue, SendResult, SendStatus
from ledgermq.client import sync as S
from ledgermq.client.consumer.common import ConsumeFromWhere
from ledgermq.client.errors import ClientStateError, MessageInvalidError
from ledgermq.client.producer.selector import select_by_hash
from ledgermq.client.producer.send_budget import AsyncBackPressureError
from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
from ledgermq.client.sync import SyncLitePullConsumer, SyncProducer, SyncPushConsumer
from ledgermq.client.sync.loop_thread import CALLBACK_THREADS
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import MessageRecord
from tests.admin.servers import BackgroundCluster, Cluster

pytestmark = pytest.mark.timeout(90)
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    bg = BackgroundCluster(tmp_path_factory.mktemp("sync-facade"))
    try:
        yield bg.start()
    finally:
        bg.stop()


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ledgermq-sync-loop"]


@pytest.fixture(autouse=True)
def no_loop_left() -> Iterator[None]:
    yield
    assert not loop_threads(), "a test left the facade's loop thread running"


def make_producer(cluster: Cluster, group: str = "pg-sync", **kw: object) -> SyncProducer:
    return SyncProducer(group, cluster.ns_addr, client_ip="127.0.0.1", **kw)


def test_every_send_kind(cluster: Cluster) -> None:
    with make_producer(cluster) as p:
        r = p.send(Message("SyncT", b"one", tags="a"))
        assert r.status is SendStatus.SEND_OK and r.queue.topic == "SyncT"
        queues = p.fetch_publish_queues("SyncT")
        assert p.send_to_queue(Message("SyncT", b"q"), queues[2]).queue == queues[2]
        orderly = p.send_orderly(Message("SyncT", b"o"), select_by_hash, "k-1")
        assert orderly.queue == select_by_hash(queues, None, "k-1")
        batch = p.send_batch([Message("SyncT", b"b1"), Message("SyncT", b"b2")], timeout=5.0)
        assert len(batch.msg_id.split(",")) == 2
        p.send_oneway(Message("SyncT", b"fire"))
        with pytest.raises(MessageInvalidError):  # the asyncio call's exception, as it is
            p.send(Message("bad topic", b"x"))
        assert len(loop_threads()) == 1


def test_send_async_callbacks_run_on_callback_threads_and_may_block(cluster: Cluster) -> None:
    with make_producer(cluster) as p:
        seen: list[tuple[str, SendResult]] = []
        nested: list[SendResult] = []

        class Callback:
            def on_success(self, result: SendResult) -> None:
                seen.append((threading.current_thread().name, result))
                nested.append(p.send(Message("SyncA", b"from a callback")))  # a blocking call is fine here

            def on_exception(self, exc: Exception) -> None:
                raise AssertionError(exc)

        fut = p.send_async(Message("SyncA", b"async"), Callback())
        assert isinstance(fut, concurrent.futures.Future)
        result = fut.result(10)
        assert len(seen) == 1 and seen[0][1] == result  # the callback ran before the future completed
        assert seen[0][0].startswith("ledgermq-sync-callback")
        assert nested[0].status is SendStatus.SEND_OK

        errors: list[Exception] = []
        bad = p.send_async(Message("SyncA", b""), on_exception=errors.append)
        with pytest.raises(MessageInvalidError):
            bad.result(10)
        assert len(errors) == 1 and isinstance(errors[0], MessageInvalidError)
        with pytest.raises(TypeError):
            p.send_async(Message("SyncA", b"x"), Callback(), on_success=print)

        many = [p.send_async(Message("SyncA", b"%d" % i)) for i in range(300)]  # past the 256 budget
        assert all(f.result(20).status is SendStatus.SEND_OK for f in many)


def test_many_threads_share_one_producer_and_one_loop(cluster: Cluster) -> None:
    with make_producer(cluster) as p, make_producer(cluster, group="pg-sync-2") as p2:
        assert p._loop is p2._loop and len(loop_threads()) == 1

        def work(n: int) -> list[str]:
            target = p if n % 2 else p2
            return [target.send(Message("SyncMT", b"%d-%d" % (n, i))).msg_id for i in range(40)]

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            ids = [i for chunk in pool.map(work, range(6)) for i in chunk]
        assert len(ids) == len(set(ids)) == 240
        p2.shutdown()
        assert len(loop_threads()) == 1  # p still uses it
        assert p.send(Message("SyncMT", b"after")).status is SendStatus.SEND_OK


def test_shutdown_is_clean_and_idempotent(cluster: Cluster) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = make_producer(cluster)
        p.start()
        p.send(Message("SyncShut", b"x"))
        p.shutdown()
        p.shutdown()
        assert not loop_threads()
        with pytest.raises(ClientStateError):
            p.send(Message("SyncShut", b"x"))
        del p
        gc.collect()
    assert [str(w.message) for w in caught] == []
    # a later facade object gets a fresh loop thread
    with make_producer(cluster, group="pg-sync-again") as again:
        assert again.send(Message("SyncShut", b"y")).status is SendStatus.SEND_OK
    p3 = make_producer(cluster, group="pg-not-started")
    with pytest.raises(ClientStateError):
        p3.send(Message("SyncShut", b"z"))
    p3.shutdown()


def test_blocking_call_on_the_loop_thread_is_refused_and_waits_can_time_out(cluster: Cluster) -> None:
    with make_producer(cluster) as p:
        lt = p._loop
        with pytest.raises(RuntimeError, match="deadlock"):
            lt.call(lambda: p.send(Message("SyncDL", b"x")))
        cancelled = threading.Event()

        async def slow() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with pytest.raises(TimeoutError):  # slow() would return after 30 s without the timeout
            lt.run(slow(), timeout=0.1)
        assert cancelled.wait(20)


def _hold_loop(p: SyncProducer) -> threading.Event:
    """Block the facade's loop thread until the returned event is set."""
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        held.set()
        release.wait(60)

    p._loop.loop.call_soon_threadsafe(hold)
    assert held.wait(20)
    return release


def test_send_async_returns_without_waiting_for_the_loop_thread(cluster: Cluster) -> None:
    """A thread firing async sends hands them over and goes on: it never waits for the loop
    thread (each call used to block until the loop had admitted its send)."""
    with make_producer(cluster) as p:
        p.send(Message("SyncHand", b"warm"))
        release = _hold_loop(p)
        futures: list[concurrent.futures.Future[SendResult]] = []
        fired = threading.Thread(
            target=lambda: futures.extend(p.send_async(Message("SyncHand", b"%d" % i)) for i in range(50))
        )
        try:
            fired.start()
            fired.join(30)
            returned_while_held = not fired.is_alive()
            assert not any(f.done() for f in futures)  # nothing ran: the loop is still held
        finally:
            release.set()
        fired.join(30)
        assert returned_while_held and len(futures) == 50
        assert all(f.result(20).status is SendStatus.SEND_OK for f in futures)

        # the send is started later, on the loop thread: what is sent is the message as it
        # was at the call, whatever the caller does with its object afterwards
        release = _hold_loop(p)
        msg = Message("SyncHand", b"as given", keys=["k1"], properties={"p": "given"})
        try:
            fut = p.send_async(msg)
            msg.body = b"changed"
            msg.properties["p"] = "changed"
            assert isinstance(msg.keys, list)
            msg.keys.append("k2")
            buffer = bytearray(b"buffer as given")
            from_buffer = p.send_async(Message("SyncHand", buffer))  # type: ignore[arg-type]
            buffer[:] = b"reused buffer!!"
        finally:
            release.set()
        with SyncAdmin(cluster.ns_addr) as admin:
            stored = admin.view_message_by_id(fut.result(20).offset_msg_id)
            assert admin.view_message_by_id(from_buffer.result(20).offset_msg_id).body == b"buffer as given"
        assert stored.body == b"as given"
        assert stored.properties["p"] == "given" and stored.properties[P.KEYS] == "k1"


def test_send_async_blocks_the_caller_while_the_budget_is_full_then_fails_it(cluster: Cluster) -> None:
    with make_producer(cluster, async_send_max_inflight=2) as p:
        p.send(Message("SyncHand", b"warm"))
        release = _hold_loop(p)
        errors: list[Exception] = []
        try:
            first = [p.send_async(Message("SyncHand", b"%d" % i)) for i in range(2)]
            started = p._target.clock.monotonic()
            third = p.send_async(Message("SyncHand", b"third"), on_exception=errors.append, timeout=0.3)
            waited = p._target.clock.monotonic() - started
            with pytest.raises(AsyncBackPressureError) as err:
                third.result(20)  # failed from the callback pool, with the loop still held
            assert waited >= 0.3  # the caller was held back for its whole timeout
        finally:
            release.set()
        assert len(errors) == 1 and errors[0] is err.value
        assert all(f.result(20).status is SendStatus.SEND_OK for f in first)
        # the slots came back with the answers: a later send is admitted at once
        assert p.send_async(Message("SyncHand", b"after"), timeout=5.0).result(20).status is SendStatus.SEND_OK


def test_send_async_edge_cases_fail_the_future_or_refuse_at_once(cluster: Cluster) -> None:
    with make_producer(cluster) as p:
        with pytest.raises(TypeError, match="coroutine function"):

            async def later(_r: SendResult) -> None: ...

            p.send_async(Message("SyncHand", b"x"), on_success=later)
        bad_body = p.send_async(Message("SyncHand", None))  # type: ignore[arg-type]
        with pytest.raises(MessageInvalidError):  # the producer's refusal, through the future
            bad_body.result(20)


def test_send_async_from_every_callback_thread_with_the_budget_full_does_not_deadlock(cluster: Cluster) -> None:
    """Callbacks may send: with the budget full and every callback thread waiting for its
    own send's back-pressure error, that error must not queue behind them on the pool."""
    with make_producer(cluster, async_send_max_inflight=1) as p:
        p.send(Message("SyncHand", b"warm"))
        release = _hold_loop(p)
        try:
            held = p.send_async(Message("SyncHand", b"takes the one slot"))
            errors: list[Exception] = []

            def from_callback_thread() -> str:
                fut = p.send_async(Message("SyncHand", b"x"), on_exception=errors.append, timeout=0.2)
                return type(fut.exception(20)).__name__

            jobs = [p._loop.callbacks.submit(from_callback_thread) for _ in range(CALLBACK_THREADS)]
            assert [j.result(60) for j in jobs] == ["AsyncBackPressureError"] * CALLBACK_THREADS
            assert len(errors) == CALLBACK_THREADS
        finally:
            release.set()
        assert held.result(20).status is SendStatus.SEND_OK


def test_shutdown_waits_for_the_callbacks_of_async_sends(cluster: Cluster) -> None:
    with make_producer(cluster, group="pg-keeps-the-loop") as other, make_producer(cluster) as p:
        order: list[str] = []
        started, gate = threading.Event(), threading.Event()

        def slow_callback(_r: SendResult) -> None:
            started.set()
            gate.wait(20)
            order.append("callback")

        fut = p.send_async(Message("SyncHand", b"x"), on_success=slow_callback)
        assert started.wait(20)

        def shut() -> None:
            p.shutdown()
            order.append("shutdown")

        closing = threading.Thread(target=shut)
        closing.start()
        closing.join(0.3)
        gate.set()
        closing.join(30)
        assert order == ["callback", "shutdown"] and fut.done()
        with pytest.raises(ClientStateError):
            p.send_async(Message("SyncHand", b"after"))
        assert other.send(Message("SyncHand", b"loop still up")).status is SendStatus.SEND_OK


def test_sync_admin(cluster: Cluster) -> None:
    with SyncAdmin(cluster.ns_addr) as admin, make_producer(cluster) as p:
        p.send(Message("SyncAdminT", b"x"))
        assert "SyncAdminT" in admin.topic_list()
        route = admin.route("SyncAdminT")
        assert [b.broker_name for b in route.broker_datas] == ["broker-a"]
        info = admin.cluster_info()
        assert "broker-a" in info.broker_addr_table
        assert admin.broker_runtime_info(cluster.broker_addr)
        with pytest.raises(AdminResponseError) as err:
            admin.route("NoSuchTopic")
        assert err.value.code == 17
        assert admin.route.__doc__ == AdminClient.route.__doc__


def test_sync_admin_wraps_every_public_coroutine_of_admin_client() -> None:
    public = {
        name
        for name, fn in inspect.getmembers(AdminClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and name != "close"
    }
    missing = {name for name in public if not hasattr(SyncAdmin, name)}
    assert not missing, f"SyncAdmin lacks blocking wrappers for {sorted(missing)}"
    for name in public:
        wrapper = getattr(SyncAdmin, name)
        assert isinstance(wrapper, S.blocking) or inspect.isfunction(wrapper), name


def test_sync_lite_pull_consumer(cluster: Cluster) -> None:
    with make_producer(cluster) as p:
        sent = {p.send(Message("SyncLite", b"%d" % i)).msg_id for i in range(20)}
        listener_threads: list[str] = []

        def on_queues(topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
            listener_threads.append(threading.current_thread().name)

        c = SyncLitePullConsumer(
            "cg-sync-lite", cluster.ns_addr, client_ip="127.0.0.1", consume_from_where=FIRST, auto_commit=False
        )
        c.subscribe("SyncLite", "*", on_queues)
        with c:
            got: list[MessageRecord] = []
            deadline = time.monotonic() + 20
            while len(got) < 20 and time.monotonic() < deadline:
                got.extend(c.poll(0.5))
            assert {m.properties[P.UNIQ_KEY] for m in got} == sent
            queues = c.assignment()
            assert queues and all(q.topic == "SyncLite" for q in queues)
            c.commit()
            assert sum(c.committed(q) for q in queues) == 20
            q = next(iter(queues))
            c.seek_to_begin(q)
            again: list[MessageRecord] = []
            while not again and time.monotonic() < deadline:
                again = c.poll(0.5)
            assert again and all(m.queue_id == q.queue_id for m in again)
            assert listener_threads and all(t.startswith("ledgermq-sync-callback") for t in listener_threads)
        with pytest.raises(ClientStateError):
            c.poll(0.1)


def test_sync_push_consumer_runs_a_plain_listener_on_its_worker_pool(cluster: Cluster) -> None:
    seen: dict[str, str] = {}
    done = threading.Event()
    lock = threading.Lock()

    def listener(msgs: list[MessageRecord], context: object) -> ConsumeConcurrentlyStatus:
        with lock:
            for m in msgs:
                seen[m.properties[P.UNIQ_KEY]] = threading.current_thread().name
            if len(seen) >= 21:  # the message that created the topic, then 20
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = SyncPushConsumer("cg-sync-push", cluster.ns_addr, client_ip="127.0.0.1", consume_from_where=FIRST)
    c.subscribe("SyncPush")
    c.register_listener(listener)
    with make_producer(cluster) as p:
        p.send(Message("SyncPush", b"create the topic"))
        with c:
            sent = {p.send(Message("SyncPush", b"%d" % i)).msg_id for i in range(20)}
            assert done.wait(20)
    assert sent <= set(seen)
    assert "ledgermq-sync-loop" not in set(seen.values())  # the consumer's own workers, not the loop
    c.shutdown()  # idempotent
