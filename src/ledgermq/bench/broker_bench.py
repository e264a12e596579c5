"""``ledgermq bench produce|consume``: real clients against a real name server and broker.

Clients run in child processes: the Apache C++ client from the ``rocketmq`` wheel
(``cpp_client_worker``) and our asyncio client (this module run as ``python -m``, uvloop).
The name server and the broker run as their own processes, as deployed.

* ``bench_compare_produce``: against one broker, in one run, the C++ client's single sync
  sends (one thread, each send awaited: the baseline), then ours the same way, ours with
  batches, ours with concurrent senders and ours with async sends; every row's ratio is
  to the C++ client's sync-send rate of the same run.
* ``bench_compare_consume``: a backlog drained and live end-to-end latency (born timestamp
  to the application's hands, one host so one clock), by the C++ push consumer and by
  ours, against the same broker, with the C++ producer producing for both.
* ``bench_produce``: the C++ client against our broker and against a stub broker that
  answers every send at once without storing anything: how much of the client-visible
  cost the broker itself adds.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ledgermq.testing.ports import free_port
from ledgermq.util.proc import die_with_parent

WORKER = "ledgermq.bench.cpp_client_worker"
OUR_WORKER = "ledgermq.bench.broker_bench"
TOPIC = "BenchTopic"


@dataclass(frozen=True, slots=True)
class ClientRun:
    count: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM in reverse start order (brokers before their name server), SIGKILL after 15 s."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


_LOGS: dict[int, Path] = {}  # pid -> the log a bench child writes, quoted when it dies at start-up


def _log_tail(proc: subprocess.Popen[bytes], limit: int = 1500) -> str:
    log = _LOGS.get(proc.pid)
    if log is None:
        return ""
    try:
        text = log.read_bytes()[-limit:].decode("utf-8", "replace")
    except OSError:
        return ""
    return f"; the end of {log}:\n{text}"


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"a bench process exited with {proc.returncode} during start-up{_log_tail(proc)}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {timeout}s")


def _wait_route(namesrv: str, topic: str, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    """Until the broker's registration is visible: clients fail fast on a missing route."""
    from ledgermq.admin.client import AdminClient

    async def has_route() -> bool:
        admin = AdminClient([namesrv])
        try:
            await admin.route(topic)
            return True
        except Exception:
            return False
        finally:
            await admin.close()

    deadline = time.monotonic() + timeout
    while not asyncio.run(has_route()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the broker never registered {topic} with {namesrv}")
        time.sleep(0.1)


def _create_topic(broker_addr: str, topic: str) -> None:
    from ledgermq.admin.client import AdminClient

    async def create() -> None:
        admin = AdminClient([])
        try:
            await admin.create_topic(broker_addr, topic)
        finally:
            await admin.close()

    asyncio.run(create())


def spawn_namesrv(work: Path, port: int) -> subprocess.Popen[bytes]:
    """A name-server process with its log and KV file under ``work``, listening when this returns."""
    work.mkdir(parents=True, exist_ok=True)
    ns = _spawn(
        ["ledgermq.cli.main", "namesrv", "-p", str(port), "--kv-config", str(work / "kv.json")], work / "namesrv.log"
    )
    _wait_port(port, ns)
    return ns


def _spawn(args: list[str], log: Path, preexec: Callable[[], None] = die_with_parent) -> subprocess.Popen[bytes]:
    """``python -m args...`` with its output in ``log``; ``preexec`` runs in the child (it
    must call ``die_with_parent`` too, as the default does)."""
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
    _LOGS[proc.pid] = log
    return proc


class Cluster:
    """A name server and one broker (real or stub) as processes, killed on exit."""

    def __init__(self, work: Path, stub: bool) -> None:
        self.work = work
        self.stub = stub
        self.ns_port = free_port()
        self.broker_port = free_port(span=2)  # and its HA port, listenPort + 1
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def __enter__(self) -> Cluster:
        self.procs.append(spawn_namesrv(self.work, self.ns_port))
        if self.stub:
            args = ["ledgermq.bench.stub_broker", self.namesrv, str(self.broker_port)]
        else:
            conf = self.work / "broker.properties"
            conf.write_text(
                "\n".join(
                    [
                        "brokerName=bench-broker",
                        "brokerIP1=127.0.0.1",
                        f"listenPort={self.broker_port}",
                        f"namesrvAddr={self.namesrv}",
                        f"storePathRootDir={self.work / 'store'}",
                        "mappedFileSizeCommitLog=268435456",
                        "",
                    ]
                )
            )
            args = ["ledgermq.cli.main", "broker", "-c", str(conf)]
        broker = _spawn(args, self.work / "broker.log")
        self.procs.append(broker)
        _wait_port(self.broker_port, broker)
        _wait_route(self.namesrv, "TBW102", broker)
        if not self.stub:  # (the stub registers TOPIC itself) a client's first route lookup must
            # find TOPIC: the C++ client's fallback to TBW102 fails when its lookup times out
            # on a loaded machine ("No route info of this topic")
            _create_topic(f"127.0.0.1:{self.broker_port}", TOPIC)
            _wait_route(self.namesrv, TOPIC, broker)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)


def _run_worker(argv: list[str], what: str, timeout: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=timeout, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the {what} worker failed ({out.returncode}): {out.stderr[-500:]}")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def _client_run(doc: dict[str, Any]) -> ClientRun:
    return ClientRun(int(doc["count"]), float(doc["seconds"]), [float(x) for x in doc["latencies_ms"]])


def run_client(mode: str, namesrv: str, topic: str, count: int, size: int, timeout: float = 600) -> ClientRun:
    """The C++ client: ``produce`` (sync sends, one thread) or ``consume`` (push consumer)."""
    return _client_run(_run_worker([WORKER, mode, namesrv, topic, str(count), str(size)], "C++ client", timeout))


def run_ours(mode: str, namesrv: str, topic: str, count: int, size: int, param: int = 1,
             timeout: float = 600) -> ClientRun:  # fmt: skip
    """Our client in a child process: ``sync`` (one sender), ``batch`` (``param`` messages per
    send), ``concurrent`` (``param`` senders), ``async`` (send_async, budget-bounded) or
    ``drain`` (the consumer reads ``count`` stored messages)."""
    argv = [OUR_WORKER, mode, namesrv, topic, str(count), str(size), str(param)]
    return _client_run(_run_worker(argv, "ledgermq client", timeout))


def cpp_client_available() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True, check=False)
    return probe.returncode == 0


def bench_produce(count: int, size: int, workdir: Path | None = None) -> tuple[ClientRun, ClientRun]:
    """(against the broker, against the stub)."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-"))
    try:
        with Cluster(base / "stub", stub=True) as stub:
            baseline = run_client("produce", stub.namesrv, "BenchTopic", count, size)
        with Cluster(base / "broker", stub=False) as real:
            measured = run_client("produce", real.namesrv, "BenchTopic", count, size)
        return measured, baseline
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class CompareRow:
    case: str
    run: ClientRun
    baseline: str | None = None  # the case whose rate this row's is compared with


def bench_compare_produce(
    count: int, size: int, batch: int = 32, concurrency: int = 64, workdir: Path | None = None
) -> list[CompareRow]:
    """C++ sync sends first (every row's baseline), then our client's cases, one broker, one run."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-"))
    cpp = "C++ client: sync send, 1 sender"
    try:
        with Cluster(base / "broker", stub=False) as real:
            ns = real.namesrv
            rows = [CompareRow(cpp, run_client("produce", ns, TOPIC, count, size), cpp)]
            for case, mode, param in (
                ("ledgermq client: sync send, 1 sender", "sync", 1),
                (f"ledgermq client: sync send_batch of {batch}, 1 sender", "batch", batch),
                (f"ledgermq client: sync send, {concurrency} concurrent senders", "concurrent", concurrency),
                ("ledgermq client: send_async, in-flight budget 256", "async", 1),
            ):
                rows.append(CompareRow(case, run_ours(mode, ns, TOPIC, count, size, param), cpp))
            return rows
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def bench_compare_consume(count: int, size: int, workdir: Path | None = None) -> list[CompareRow]:
    """Backlog drain and live latency, the C++ push consumer then ours, against one broker;
    the C++ producer produces for both."""
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-"))
    cpp_drain = "C++ push consumer: drain a backlog"
    cpp_live = "C++ push consumer: live, born -> callback"
    try:
        with Cluster(base / "broker", stub=False) as real:
            ns = real.namesrv
            run_client("produce", ns, "BenchBacklog", count, size)  # count + 1 (warm-up) stored
            drained = run_client("consume", ns, "BenchBacklog", count + 1, size)
            ours_drained = run_ours("drain", ns, "BenchBacklog", count + 1, size)
            live = _consume_while_producing(ns, "BenchLive", count, size)
            ours_live = _consume_while_producing(ns, "BenchLiveOurs", count, size, ours=True)
        return [
            CompareRow(cpp_drain, ClientRun(drained.count, drained.seconds, []), cpp_drain),
            CompareRow(
                f"ledgermq {CONSUMER_KIND}: drain a backlog",
                ClientRun(ours_drained.count, ours_drained.seconds, []),
                cpp_drain,
            ),
            CompareRow(cpp_live, live),  # the rate of a live run is the producer's: no ratio
            CompareRow(f"ledgermq {CONSUMER_KIND}: live, born -> in hand", ours_live),
        ]
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def bench_consume(count: int, size: int, workdir: Path | None = None) -> tuple[ClientRun, ClientRun]:
    """(backlog drain, live delivery).

    First the consumer drains ``count`` stored messages (throughput); then, with a consumer
    already subscribed, ``count`` more are produced and each one's end-to-end latency
    (born timestamp to the consumer's callback, one host so one clock) is recorded.
    """
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-"))
    try:
        with Cluster(base / "broker", stub=False) as real:
            run_client("produce", real.namesrv, "BenchBacklog", count, size)
            drained = run_client("consume", real.namesrv, "BenchBacklog", count + 1, size)
            backlog = ClientRun(drained.count, drained.seconds, [])  # born->callback says nothing here
            live = _consume_while_producing(real.namesrv, "BenchLive", count, size)
        return backlog, live
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)


def _consume_while_producing(namesrv: str, topic: str, count: int, size: int, *, ours: bool = False) -> ClientRun:
    run_client("produce", namesrv, topic, 1, size)  # the topic exists before the consumer subscribes
    # It will see the 2 set-up messages (warm-up + 1), then the measured run's warm-up + count.
    if ours:
        argv = [OUR_WORKER, "live", namesrv, topic, str(count + 3), str(size), "1"]
    else:
        argv = [WORKER, "consume", namesrv, topic, str(count + 3), str(size)]
    consumer = subprocess.Popen(
        [sys.executable, "-m", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "READY":
            raise RuntimeError("the C++ consumer did not start")
        time.sleep(3.0)  # the C++ client's first rebalance and pull, before we start sending
        started_ms = time.time() * 1000
        run_client("produce", namesrv, topic, count, size)
        out, err = consumer.communicate(timeout=600)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"the C++ consumer failed: {err[-500:]}")
    doc = json.loads(lines[-1])
    measured = [float(lat) for lat, born in zip(doc["latencies_ms"], doc["born_ms"], strict=True) if born >= started_ms]
    return ClientRun(int(doc["count"]), float(doc["seconds"]), measured)


# -- our client, in its own process (``python -m ledgermq.bench.broker_bench MODE ...``) --------
CONSUMER_KIND = "push consumer"


def _record(latencies: list[float], t0: float, _fut: object) -> None:
    latencies.append(time.perf_counter() - t0)


def _ms(seconds: list[float]) -> list[float]:
    return [round(s * 1000, 4) for s in seconds]


async def _ours_produce(mode: str, namesrv: str, topic: str, count: int, size: int, param: int) -> dict[str, Any]:
    from ledgermq.client import Message, Producer

    body = b"x" * size
    clock = time.perf_counter
    latencies: list[float] = []
    async with Producer(f"bench-ours-{mode}-{os.getpid()}", namesrv, send_timeout=30.0) as producer:
        await producer.send(Message(topic, body))  # route lookup and connection set-up stay out of the timing
        started = clock()
        if mode == "sync":
            for _ in range(count):
                msg = Message(topic, body)
                t0 = clock()
                await producer.send(msg)
                latencies.append(clock() - t0)
        elif mode == "batch":
            batches = math.ceil(count / param)
            count = batches * param
            for _ in range(batches):
                msgs = [Message(topic, body) for _ in range(param)]
                t0 = clock()
                await producer.send_batch(msgs)
                latencies.append(clock() - t0)
        elif mode == "concurrent":
            shares = [count // param + (1 if i < count % param else 0) for i in range(param)]

            async def sender(n: int) -> None:
                for _ in range(n):
                    msg = Message(topic, body)
                    t0 = clock()
                    await producer.send(msg)
                    latencies.append(clock() - t0)

            await asyncio.gather(*(sender(n) for n in shares))
        elif mode == "async":
            futures = []
            for _ in range(count):
                await producer.wait_for_async_capacity()  # back-pressure: never run ahead of the budget
                t0 = clock()
                fut = producer.send_async(Message(topic, body))
                fut.add_done_callback(partial(_record, latencies, t0))
                futures.append(fut)
            await asyncio.gather(*futures)
        else:
            raise ValueError(f"unknown produce mode {mode!r}")
        elapsed = clock() - started
    return {"count": count, "seconds": elapsed, "latencies_ms": _ms(latencies)}


async def _ours_consume(mode: str, namesrv: str, topic: str, count: int) -> dict[str, Any]:
    """Our push consumer with an ``async def`` listener (run on the event loop), Java's
    defaults otherwise (pull batches of 32, one message per listener call). ``drain``: read
    ``count`` stored messages; ``live``: print READY, then record born -> listener latency of
    every message until ``count`` came."""
    from ledgermq.client.consumer.common import ConsumeFromWhere
    from ledgermq.client.push.consume_service import ConsumeConcurrentlyStatus
    from ledgermq.client.push.consumer import PushConsumer
    from ledgermq.protocol.message import MessageRecord

    got = 0
    first: float | None = None
    latencies: list[float] = []
    born: list[int] = []
    done = asyncio.Event()

    async def listener(msgs: list[MessageRecord], _context: object) -> ConsumeConcurrentlyStatus:
        nonlocal got, first
        now_ms = time.time() * 1000
        if first is None:
            first = time.perf_counter()
        for msg in msgs:
            born.append(msg.born_timestamp)
            latencies.append(now_ms - msg.born_timestamp)
        got += len(msgs)
        if got >= count:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        f"bench-ours-consumer-{os.getpid()}", namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    await consumer.start()
    try:
        if mode == "live":
            _emit("READY")
        try:
            await asyncio.wait_for(done.wait(), 300)
        except TimeoutError:
            pass
        end = time.perf_counter()
    finally:
        # ClientInstance's rebalance loop can swallow the cancellation of its shutdown (3.11's
        # wait_for returns when a rebalance wake-up and the cancel coincide) and hang
        # shutdown: bounded here so a figure already measured is not lost.
        try:
            await asyncio.wait_for(consumer.shutdown(), 15)
        except TimeoutError:
            print("the push consumer's shutdown hung; abandoned after 15 s", file=sys.stderr)
    return {"count": got, "seconds": end - (first or end), "latencies_ms": latencies, "born_ms": born}


def _emit(line: str) -> None:
    """Write one line to stdout completely: after the client ran, a large write to the pipe
    came back short (65,536 bytes) and ``print`` lost the rest, so loop over ``os.write``."""
    sys.stdout.flush()
    view = memoryview((line + "\n").encode())
    while view:
        try:
            view = view[os.write(sys.stdout.fileno(), view) :]
        except BlockingIOError:
            select.select([], [sys.stdout.fileno()], [], 1.0)


def _worker_main(argv: list[str]) -> None:
    from ledgermq.aio.loops import new_event_loop

    mode, namesrv, topic, count, size, param = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    loop = new_event_loop()
    try:
        if mode in ("drain", "live"):
            doc = loop.run_until_complete(_ours_consume(mode, namesrv, topic, count))
        else:
            doc = loop.run_until_complete(_ours_produce(mode, namesrv, topic, count, size, param))
        left = asyncio.all_tasks(loop)  # only after an abandoned shutdown
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=5))
    finally:
        loop.close()
    _emit(json.dumps(doc))


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
