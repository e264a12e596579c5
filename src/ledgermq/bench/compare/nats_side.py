"""The NATS JetStream side: one ``nats-server -js`` (file storage in a temporary directory,
one stream, one replica) and nats-py in the bench process, on a loop of its own.

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
from ledgermq.bench.compare.model import BATCH, DRAIN_PULL, INFLIGHT, JETSTREAM, SYNC, CompareSettings, Measured
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
    """``with JetStreamRunner(settings) as r:`` the server up, the stream created."""

    name = JETSTREAM

    def __init__(self, settings: CompareSettings, binary: str, work: Path | None = None) -> None:
        self.settings = settings
        self.binary = binary
        self._own_work = work is None
        self.work = work or Path(tempfile.mkdtemp(prefix="ledgermq-cmp-nats-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc: Any = None
        self.js: Any = None
        self.body = b"x" * settings.size

    def workloads(self) -> tuple[str, ...]:
        return (SYNC, INFLIGHT, *(BATCH.format(b) for b in self.settings.batches), DRAIN_PULL)

    def server_pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []

    def __enter__(self) -> JetStreamRunner:
        from ledgermq.aio.loops import new_event_loop

        nats = import_nats()
        try:
            store = self.work / "jetstream"
            store.mkdir(parents=True, exist_ok=True)
            argv = [self.binary, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port)]
            with open(self.work / "nats-server.log", "ab") as log:
                self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            _wait_port(self.port, self.proc)
            self.loop = new_event_loop()
            self.nc = self._call(nats.connect(f"nats://127.0.0.1:{self.port}", max_reconnect_attempts=0))
            self.js = self.nc.jetstream()
            self._call(self.js.add_stream(name=STREAM, subjects=["cmp.>"], storage="file", num_replicas=1))
            for _ in range(10):
                self._call(self.js.publish(SUBJECT, self.body))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.loop is not None:
                if self.nc is not None:
                    with contextlib.suppress(Exception):
                        self._call(asyncio.wait_for(self.nc.close(), 10))
                self.loop.close()
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
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
        if workload.startswith(BATCH.format("")):
            size = int(workload.removeprefix(BATCH.format("")))
            return self._call(_timed(lambda lat: self._batches(SUBJECT, s.messages, size, lat), s.cap_s))  # type: ignore[no-any-return]
        if workload == DRAIN_PULL:
            return self._call(self._drain(round_no))  # type: ignore[no-any-return]
        raise ValueError(f"JetStream has no workload {workload!r}")

    # -- workloads --------------------------------------------------------------------------
    async def _concurrent(self, senders: int, latencies: list[float]) -> int:
        """``senders`` tasks, each awaiting its publish's ack before the next."""
        js, body, clock = self.js, self.body, time.perf_counter
        deadline = clock() + self.settings.cap_s
        remaining = self.settings.messages

        async def sender() -> None:
            nonlocal remaining
            while remaining > 0 and clock() < deadline:
                remaining -= 1
                t0 = clock()
                await js.publish(SUBJECT, body, timeout=30.0)
                latencies.append((clock() - t0) * 1000)

        await asyncio.gather(*(sender() for _ in range(senders)))
        return len(latencies)

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
