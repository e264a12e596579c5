"""``ledgermq bench produce|consume``: a real client against a real name server and broker.

The client is the Apache C++ client from the ``rocketmq`` wheel (our own client joins
when it exists), in a child process. The broker runs as its own process, as deployed.
The baseline, measured in the same run, is the same client against a stub broker that
answers every send at once without storing anything: the ratio is how much of the
client-visible cost the broker itself adds.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ledgermq.util.proc import die_with_parent

WORKER = "ledgermq.bench.cpp_client_worker"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"a bench process exited with {proc.returncode} during start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {timeout}s")


def _wait_route(namesrv: str, topic: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
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


def spawn_namesrv(work: Path, port: int) -> subprocess.Popen[bytes]:
    """A name-server process with its log and KV file under ``work``, listening when this returns."""
    work.mkdir(parents=True, exist_ok=True)
    ns = _spawn(
        ["ledgermq.cli.main", "namesrv", "-p", str(port), "--kv-config", str(work / "kv.json")], work / "namesrv.log"
    )
    _wait_port(port, ns)
    return ns


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [sys.executable, "-m", *args], stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
    )


class Cluster:
    """A name server and one broker (real or stub) as processes, killed on exit."""

    def __init__(self, work: Path, stub: bool) -> None:
        self.work = work
        self.stub = stub
        self.ns_port = free_port()
        self.broker_port = free_port()
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
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def run_client(mode: str, namesrv: str, topic: str, count: int, size: int, timeout: float = 600) -> ClientRun:
    out = subprocess.run(
        [sys.executable, "-m", WORKER, mode, namesrv, topic, str(count), str(size)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the C++ client worker failed ({out.returncode}): {out.stderr[-500:]}")
    doc = json.loads(lines[-1])
    return ClientRun(int(doc["count"]), float(doc["seconds"]), [float(x) for x in doc["latencies_ms"]])


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


def _consume_while_producing(namesrv: str, topic: str, count: int, size: int) -> ClientRun:
    run_client("produce", namesrv, topic, 1, size)  # the topic exists before the consumer subscribes
    # It will see the 2 set-up messages (warm-up + 1), then the measured run's warm-up + count.
    consumer = subprocess.Popen(
        [sys.executable, "-m", WORKER, "consume", namesrv, topic, str(count + 3), str(size)],
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
