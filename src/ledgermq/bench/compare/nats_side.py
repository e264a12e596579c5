"""The NATS JetStream side: one ``nats-server -js`` (file storage in a temporary directory,
one stream, one replica), or three clustered on loopback with a stream of three replicas
(R3, against a 3-node DLedger group), and nats-py in the bench process, on a loop of its
own.

``ensure_nats_server`` installs the Debian package when the binary is missing (said on
stderr) and ``import_nats`` says which extra to install: the bench must not half-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from types import ModuleType
from typing import Any

from ledgermq.bench.broker_bench import _wait_port
from ledgermq.bench.compare import send_patterns
from ledgermq.bench.compare.model import (
    ASYNC_CAPACITY,
    ASYNC_GATHER,
    BATCH,
    DRAIN_PULL,
    INFLIGHT,
    JETSTREAM,
    SYNC,
    CompareSettings,
    Measured,
)
from ledgermq.bench.compare.model import timed as _timed
from ledgermq.testing.ports import free_port
from ledgermq.util.proc import die_with_parent

STREAM = "CMP"
SUBJECT = "cmp.send"


class BenchSetupError(RuntimeError):
    """A prerequisite is missing; the message is the one line the user sees."""


def ensure_nats_server() -> str:
    """The path of ``nats-server``, installed with apt-get if it is not on PATH."""
    found = shutil.which("nats-server")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise BenchSetupError("nats-server is not on PATH and apt-get is not available to install it")
    print("nats-server is not on PATH: installing it with apt-get (package nats-server)", file=sys.stderr)
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "nats-server"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BenchSetupError(f"could not install nats-server ({' '.join(argv)}: {tail[0]})")
    found = shutil.which("nats-server")
    if not found:
        raise BenchSetupError("apt-get installed nats-server but it is still not on PATH")
    return found


def import_nats() -> ModuleType:
    """nats-py, or one line saying how to get it (the optional extra ``bench``)."""
    try:
        return importlib.import_module("nats")
    except ImportError as exc:
        raise BenchSetupError("nats-py is missing: pip install -e '.[bench]'") from exc


class JetStreamRunner:
    """``with JetStreamRunner(settings, binary) as r:`` the server(s) up, the stream created.
    ``replicas=3`` runs three clustered servers (free loopback ports) and an R3 stream."""

    def __init__(
        self,
        settings: CompareSettings,
        binary: str,
        work: Path | None = None,
        *,
        name: str = JETSTREAM,
        replicas: int = 1,
        workloads: tuple[str, ...] | None = None,
    ) -> None:
        if replicas not in (1, 3):
            raise ValueError(f"JetStream runs with 1 or 3 replicas here, not {replicas}")
        self.name = name
        self.settings = settings
        self.binary = binary
        self.replicas = replicas
        self._workloads = workloads
        self._own_work = work is None
        self.work = work or Path(tempfile.mkdtemp(prefix="ledgermq-cmp-nats-"))
        self.ports = [free_port() for _ in range(replicas)]
        self.port = self.ports[0]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc: Any = None
        self.js: Any = None
        self.body = b"x" * settings.size

    def workloads(self) -> tuple[str, ...]:
        if self._workloads is not None:
            return self._workloads
        return (*self.settings.send_workloads(), DRAIN_PULL)

    def server_pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def _argv(self, i: int, cluster_ports: list[int]) -> list[str]:
        store = self.work / f"jetstream-{i}"
        store.mkdir(parents=True, exist_ok=True)
        argv = [self.binary, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.ports[i])]
        if cluster_ports:
            routes = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(cluster_ports) if j != i)
            argv += ["-n", f"cmp-{i}", "--cluster_name", "cmp", "--cluster", f"nats://127.0.0.1:{cluster_ports[i]}",
                     "--routes", routes]  # fmt: skip
        return argv

    def __enter__(self) -> JetStreamRunner:
        from ledgermq.aio.loops import new_event_loop

        nats = import_nats()
        try:
            self.work.mkdir(parents=True, exist_ok=True)
            cluster_ports = [free_port() for _ in self.ports] if self.replicas > 1 else []
            for i in range(self.replicas):
                with open(self.work / f"nats-server-{i}.log", "ab") as log:
                    proc = subprocess.Popen(
                        self._argv(i, cluster_ports), stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
                    )
                self.procs.append(proc)
            for port, proc in zip(self.ports, self.procs, strict=True):
                _wait_port(port, proc)
            self.loop = new_event_loop()
            servers = [f"nats://127.0.0.1:{p}" for p in self.ports]
            self.nc = self._call(nats.connect(servers, max_reconnect_attempts=0, dont_randomize=True))
            self.js = self.nc.jetstream()
            self._call(self._add_stream())
            for _ in range(10):
                self._call(self.js.publish(SUBJECT, self.body))
        except BaseException:
            self.__exit__()
            raise
        return self

    async def _add_stream(self, timeout: float = 30.0) -> None:
        """The stream, once the cluster has elected its meta leader (at once with one server)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.js.add_stream(name=STREAM, subjects=["cmp.>"], storage="file", num_replicas=self.replicas)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        try:
            if self.loop is not None:
                if self.nc is not None:
                    with contextlib.suppress(Exception):
                        self._call(asyncio.wait_for(self.nc.close(), 10))
                self.loop.close()
        finally:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in self.procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if self._own_work:
                shutil.rmtree(self.work, ignore_errors=True)

    def _call(self, coro: Awaitable[Any]) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    # -- the scheduler's interface --------------------------------------------------------
    def prepare(self, workload: str, round_no: int) -> None:
        if workload == DRAIN_PULL:
            self._call(self._batches(_drain_subject(round_no), self.settings.backlog, 64, []))

    def run(self, workload: str, round_no: int) -> Measured:
        s = self.settings
        if workload == SYNC:
            return self._call(_timed(lambda lat: self._concurrent(1, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == INFLIGHT:
            return self._call(_timed(lambda lat: self._concurrent(s.inflight, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload in (ASYNC_GATHER, ASYNC_CAPACITY):
            return self._call(_timed(lambda lat: self._async_publishes(workload, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload.startswith(BATCH.format("")):
            size = int(workload.removeprefix(BATCH.format("")))
            return self._call(_timed(lambda lat: self._batches(SUBJECT, s.messages, size, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == DRAIN_PULL:
            return self._call(self._drain(round_no))  # type: ignore[no-any-return]
        raise ValueError(f"JetStream has no workload {workload!r}")

    # -- workloads --------------------------------------------------------------------------
    async def _concurrent(self, senders: int, latencies: list[float]) -> int:
        """``senders`` tasks, each awaiting its publish's ack before the next."""
        js, body, s = self.js, self.body, self.settings
        return await send_patterns.senders(
            lambda: js.publish(SUBJECT, body, timeout=30.0), s.messages, senders, s.cap_s, latencies
        )

    async def _async_publishes(self, workload: str, latencies: list[float]) -> int:
        """JetStream's forms of ``send_async`` in a loop: every publish started as a task
        then gathered, or started while a semaphore of ``inflight`` has room."""
        js, body, s = self.js, self.body, self.settings

        def publish() -> Awaitable[Any]:
            return js.publish(SUBJECT, body, timeout=30.0)  # type: ignore[no-any-return]

        if workload == ASYNC_GATHER:
            return await send_patterns.fired(lambda: asyncio.ensure_future(publish()), s.messages, latencies)
        paced = send_patterns.Paced(s.inflight)
        return await send_patterns.paced(lambda: paced.start(publish), paced.wait_for_room, s.messages, latencies)

    async def _batches(self, subject: str, count: int, size: int, latencies: list[float]) -> int:
        """``size`` publishes at once, then every ack awaited: JetStream's nearest to a batch
        send (it has no batch publish); each message's latency is the group's round trip."""
        js, body, clock = self.js, self.body, time.perf_counter
        deadline = clock() + self.settings.cap_s * 4
        done = 0
        while done < count and clock() < deadline:
            t0 = clock()
            await asyncio.gather(*(js.publish(subject, body, timeout=30.0) for _ in range(size)))
            latencies.extend([(clock() - t0) * 1000] * size)
            done += size
        return done

    async def _drain(self, round_no: int) -> Measured:
        """A durable pull consumer on the round's subject, ``fetch`` of ``fetch_batch`` in a
        loop, no acks (AckPolicy none: our consumers commit offsets, not messages); timed
        from the first message in hand to the last."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        want, got = self.settings.backlog, 0
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        sub = await self.js.pull_subscribe(_drain_subject(round_no), durable=f"cmp-drain-{round_no}", config=config)
        clock = time.perf_counter
        first: float | None = None
        give_up = clock() + self.settings.cap_s + 30
        try:
            while got < want and clock() < give_up:
                try:
                    msgs = await sub.fetch(self.settings.fetch_batch, timeout=1.0)
                except NatsTimeout:
                    continue
                if msgs and first is None:
                    first = clock()
                got += len(msgs)
            end = clock()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sub.unsubscribe(), 5)
        return Measured(min(got, want), end - (first or end))


def _drain_subject(round_no: int) -> str:
    return f"cmp.drain.{round_no}"
