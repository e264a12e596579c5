"""The ledgermq side: a name server and a broker group as processes (a master and one
slave, ``HAPair``, by default; a 3-node DLedger group or a controller-mode pair when
given), and our asyncio client in the bench process on a loop of its own (uvloop, as the
CLI uses); the blocking facade's ``SyncProducer`` on its own loop thread for the facade
pattern.

The client lives in the bench process rather than in a worker so both systems' clients
pay the same: nats-py runs there too. Server CPU counts every process of the group and
its name server.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledgermq.bench.broker_bench import _wait_port
from ledgermq.bench.compare import send_patterns
from ledgermq.bench.compare.model import (
    ASYNC_CAPACITY,
    ASYNC_GATHER,
    BATCH,
    DRAIN_LITE,
    DRAIN_PUSH,
    FACADE_ASYNC,
    FACADE_SYNC,
    INFLIGHT,
    SYNC,
    CompareSettings,
    Measured,
)
from ledgermq.bench.compare.model import (
    timed as _timed,
)
from ledgermq.bench.replication_bench import MIB, HAPair, _wait_quiet

if TYPE_CHECKING:
    from ledgermq.bench.controller_bench import ControllerPair
    from ledgermq.bench.replication_bench import DLedgerTrio
    from ledgermq.client import Producer
    from ledgermq.client.sync import SyncProducer
    from ledgermq.client.tls import TlsOptions

TOPIC = "CmpTopic"
SHUTDOWN_CAP_S = 15.0  # a consumer's shutdown can hang (see broker_bench._ours_consume)


class LedgermqRunner:
    """``with LedgermqRunner(name, role, flush, settings, workloads) as r:`` up and routed."""

    def __init__(
        self,
        name: str,
        role: str,
        flush: str,
        settings: CompareSettings,
        workloads: tuple[str, ...],
        work: Path | None,
        *,
        server_props: dict[str, str] | None = None,
        tls: TlsOptions | None = None,
        group: DLedgerTrio | ControllerPair | None = None,
    ) -> None:
        """``role``/``flush``/``server_props`` make the master-slave pair; ``group`` (a
        DLedger group or a controller-mode pair, not started) replaces it."""
        self.name = name
        self.settings = settings
        self._workloads = workloads
        self._own_work = work is None
        self.work = work or Path(tempfile.mkdtemp(prefix="ledgermq-cmp-"))
        self.pair: HAPair | DLedgerTrio | ControllerPair = group or HAPair(
            self.work, role, 256 * MIB, flushDiskType=flush, **(server_props or {})
        )
        self.tls = tls  # the client's TLS (bench/tls_bench.py), None: plain
        self.loop: asyncio.AbstractEventLoop | None = None
        self.producer: Producer | None = None
        self.facade: SyncProducer | None = None  # made by the first facade run
        self.body = b"x" * settings.size

    def workloads(self) -> tuple[str, ...]:
        return self._workloads

    def server_pids(self) -> list[int]:
        return [p.pid for p in self.pair.procs if p.poll() is None]

    def __enter__(self) -> LedgermqRunner:
        from ledgermq.aio.loops import new_event_loop
        from ledgermq.client import Producer

        try:
            self.pair.__enter__()
            if isinstance(self.pair, HAPair):
                self.pair.start_master()
                slave = self.pair.spawn_slave()
                _wait_port(self.pair.slave_port, slave)
            else:
                self.pair.start()
            self.loop = new_event_loop()
            self.producer = Producer(
                f"cmp-{self.name.replace(' ', '-')}",
                self.pair.namesrv,
                send_timeout=30.0,
                use_tls=self.tls is not None,
                tls=self.tls,
            )
            self._call(self.producer.start())
            for _ in range(10):  # route lookup, topic auto-creation, connections: not timed
                self._call(self._send_one())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.facade is not None:
                try:
                    self.facade.shutdown()
                except Exception:
                    pass
            if self.loop is not None and self.producer is not None:
                try:
                    self._call(asyncio.wait_for(self.producer.shutdown(), SHUTDOWN_CAP_S))
                except Exception:
                    pass
            if self.loop is not None:
                self.loop.close()
        finally:
            self.pair.__exit__()
            if self._own_work:
                shutil.rmtree(self.work, ignore_errors=True)

    def _call(self, coro: Awaitable[Any]) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    async def _send_one(self, topic: str = TOPIC) -> None:
        from ledgermq.client import Message

        assert self.producer is not None
        await self.producer.send(Message(topic, self.body))

    # -- the scheduler's interface --------------------------------------------------------
    def prepare(self, workload: str, round_no: int) -> None:
        """Replicas caught up and dispatched before every run; a backlog for a drain."""
        if workload in (DRAIN_PUSH, DRAIN_LITE):
            self._call(self._batches(_drain_topic(workload, round_no), self.settings.backlog, 64, []))
        self._call(_wait_quiet(self.pair, 60.0))

    def run(self, workload: str, round_no: int) -> Measured:
        s = self.settings
        if workload == SYNC:
            return self._call(_timed(lambda lat: self._concurrent(1, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == INFLIGHT:
            return self._call(_timed(lambda lat: self._concurrent(s.inflight, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload in (ASYNC_GATHER, ASYNC_CAPACITY):
            return self._call(_timed(lambda lat: self._async_sends(workload, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == FACADE_SYNC:
            return self._facade_sends()
        if workload == FACADE_ASYNC:
            return self._facade_async_sends()
        if workload.startswith(BATCH.format("")):
            size = int(workload.removeprefix(BATCH.format("")))
            return self._call(_timed(lambda lat: self._batches(TOPIC, s.messages, size, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == DRAIN_PUSH:
            return self._call(self._drain_push(_drain_topic(workload, round_no)))  # type: ignore[no-any-return]
        if workload == DRAIN_LITE:
            return self._call(self._drain_lite(_drain_topic(workload, round_no)))  # type: ignore[no-any-return]
        raise ValueError(f"ledgermq has no workload {workload!r}")

    # -- workloads --------------------------------------------------------------------------
    async def _concurrent(self, senders: int, latencies: list[float]) -> int:
        """``senders`` tasks, each awaiting its send before the next: that many in flight."""
        from ledgermq.client import Message

        assert self.producer is not None
        producer, body = self.producer, self.body
        s = self.settings
        return await send_patterns.senders(
            lambda: producer.send(Message(TOPIC, body)), s.messages, senders, s.cap_s, latencies
        )

    async def _async_sends(self, workload: str, latencies: list[float]) -> int:
        """``send_async`` fired in a loop then gathered, or paced by ``wait_for_async_capacity``."""
        from ledgermq.client import Message

        assert self.producer is not None
        producer, body, count = self.producer, self.body, self.settings.messages

        def start() -> asyncio.Future[object]:
            return producer.send_async(Message(TOPIC, body))  # type: ignore[return-value]

        if workload == ASYNC_GATHER:
            return await send_patterns.fired(start, count, latencies)
        return await send_patterns.paced(start, producer.wait_for_async_capacity, count, latencies)

    def _facade(self) -> SyncProducer:
        """The blocking facade's producer, made and warmed by the first facade run."""
        from ledgermq.client import Message
        from ledgermq.client.sync import SyncProducer

        if self.facade is None:
            self.facade = SyncProducer(
                f"cmp-facade-{self.name.replace(' ', '-')}", self.pair.namesrv, send_timeout=30.0
            )
            self.facade.start()
            for _ in range(10):
                self.facade.send(Message(TOPIC, self.body))
        return self.facade

    def _facade_sends(self) -> Measured:
        """The blocking facade: ``SyncProducer.send`` in a loop on this thread."""
        from ledgermq.client import Message

        facade, body, s = self._facade(), self.body, self.settings
        latencies: list[float] = []
        started = time.perf_counter()
        count = send_patterns.blocking(lambda: facade.send(Message(TOPIC, body)), s.messages, s.cap_s, latencies)
        return Measured(count, time.perf_counter() - started, tuple(latencies))

    def _facade_async_sends(self) -> Measured:
        """The blocking facade's ``send_async`` fired in a loop on this thread, then waited."""
        from ledgermq.client import Message

        facade, body, s = self._facade(), self.body, self.settings
        latencies: list[float] = []
        started = time.perf_counter()
        count = send_patterns.fired_from_thread(
            lambda: facade.send_async(Message(TOPIC, body)), s.messages, s.cap_s, latencies
        )
        return Measured(count, time.perf_counter() - started, tuple(latencies))

    async def _batches(self, topic: str, count: int, size: int, latencies: list[float]) -> int:
        """Sync ``send_batch`` of ``size`` messages, one after the other; each message's
        latency is its batch's round trip."""
        from ledgermq.client import Message

        assert self.producer is not None
        clock = time.perf_counter
        deadline = clock() + self.settings.cap_s * 4  # a backlog gets longer than a measured run
        done = 0
        for _ in range(math.ceil(count / size)):
            if clock() > deadline:
                break
            msgs = [Message(topic, self.body) for _ in range(size)]
            t0 = clock()
            await self.producer.send_batch(msgs)
            latencies.extend([(clock() - t0) * 1000] * size)
            done += size
        return done

    async def _drain_push(self, topic: str) -> Measured:
        """Our push consumer, ``async def`` listener, Java's defaults (pull 32, 1 per call);
        timed from the first message in hand to the last."""
        from ledgermq.client.consumer.common import ConsumeFromWhere
        from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
        from ledgermq.client.push.consumer import PushConsumer
        from ledgermq.protocol.message import MessageRecord

        want, got = self.settings.backlog, 0
        first: float | None = None
        done = asyncio.Event()

        async def listener(msgs: list[MessageRecord], _context: object) -> ConsumeConcurrentlyStatus:
            nonlocal got, first
            if first is None:
                first = time.perf_counter()
            got += len(msgs)
            if got >= want:
                done.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            f"cmp-push-{topic}", self.pair.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        consumer.subscribe(topic)
        consumer.register_listener(listener)
        await consumer.start()
        try:
            try:
                await asyncio.wait_for(done.wait(), self.settings.cap_s + 30)  # + the first rebalance
            except TimeoutError:
                pass
            end = time.perf_counter()
        finally:
            try:
                await asyncio.wait_for(consumer.shutdown(), SHUTDOWN_CAP_S)
            except TimeoutError:
                pass
        return Measured(min(got, want), end - (first or end))

    async def _drain_lite(self, topic: str) -> Measured:
        """Our lite pull consumer, ``poll`` in a loop, pull batches of 32 (as the push
        consumer's) rather than its default 10."""
        from ledgermq.client.consumer.common import ConsumeFromWhere
        from ledgermq.client.lite_pull.consumer import LitePullConsumer

        want, got = self.settings.backlog, 0
        consumer = LitePullConsumer(
            f"cmp-lite-{topic}",
            self.pair.namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            pull_batch_size=32,
            use_tls=self.tls is not None,
            tls=self.tls,
        )
        consumer.subscribe(topic)
        await consumer.start()
        first: float | None = None
        clock = time.perf_counter
        give_up = clock() + self.settings.cap_s + 30
        try:
            while got < want and clock() < give_up:
                msgs = await consumer.poll(1.0)
                if msgs and first is None:
                    first = clock()
                got += len(msgs)
            end = clock()
        finally:
            try:
                await asyncio.wait_for(consumer.shutdown(), SHUTDOWN_CAP_S)
            except TimeoutError:
                pass
        return Measured(min(got, want), end - (first or end))


def _drain_topic(workload: str, round_no: int) -> str:
    """A fresh topic (and so a fresh consumer group) per drain and round."""
    return f"CmpDrain{'Push' if workload == DRAIN_PUSH else 'Lite'}{round_no}"
