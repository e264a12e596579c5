"""``ledgermq bench spark``: the Spark source and sink against a real name server and broker.

One run, one machine: a name server and a broker process, a local SparkSession
(``local[2]`` by default) in this process. Measured:

* **sink**: ``spark.range(N)`` with ``value`` bodies of ``--body-size`` bytes written with
  ``df.write.format("ledgermq")`` (this also fills the topic the reads use), with
  ``exactlyOnce`` off and on, alternated (off, on, on, off, ...) over ``--repeats``, best of
  each;
* **read**: ``spark.read.format("ledgermq")`` of the N messages into the ``noop`` sink
  (every row materialised), best of ``--repeats``;

each against baselines measured in the same run (one untimed Spark read of each kind first,
then the cases in ABBA rounds: the Spark cases measure warm workers, as a long job sees them):

* **raw pulls**: the same messages pulled by one process with the same pull size, one
  coroutine per queue, bodies not decoded (what the broker and the wire allow);
* **pull + Arrow decode**: the same, decoded into Arrow batches (the source's own decoder)
  in one process (what one Python worker can do without Spark);
* **Spark, Arrow batches from memory**: a Python data source that yields prebuilt record
  batches of the same schema and sizes (Spark's cost per row for this schema);
* **producer**: our asyncio producer sending the same bodies in batches of the same size
  from one process (the sink's ceiling without Spark).

The broker's pull caps (``maxTransferCountOnMessageInMemory`` / ``...Bytes...``: 32
messages / 256 KiB per pull by default, as RocketMQ) are raised to ``--pull-cap`` messages
for the run; ``--pull-cap 32`` measures the default.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.bench.broker_bench import (
    _spawn,
    _wait_port,
    _wait_route,
    spawn_namesrv,
    stop_processes,
)
from ledgermq.testing.ports import free_port

TOPIC = "SparkBench"
BROKER = "spark-bench"


@dataclass
class Rate:
    case: str
    rows: int
    seconds: list[float] = field(default_factory=list)
    # CPU seconds by role (broker, spark JVM, python workers, bench process) over every run
    cpu: dict[str, float] = field(default_factory=dict)

    def us_per_row(self) -> dict[str, float]:
        """CPU microseconds per row by role, averaged over the runs."""
        rows = self.rows * max(1, len(self.seconds))
        return {k: round(v * 1e6 / rows, 3) for k, v in self.cpu.items()} if rows else {}

    @property
    def best(self) -> float:
        return min(self.seconds) if self.seconds else 0.0

    @property
    def rate(self) -> float:
        return self.rows / self.best if self.best else 0.0


@dataclass
class SparkBenchResult:
    messages: int
    body_size: int
    queues: int
    pull_cap: int
    master: str
    sink: Rate
    sink_eo: Rate
    producer: Rate
    read: Rate
    raw_pull: Rate
    decode: Rate
    arrow_yield: Rate
    load: tuple[float, float] = (-1.0, -1.0)  # the host's 1-minute load average at start and end

    def rows(self) -> list[tuple[str, Rate, Rate]]:
        """(case, measured, baseline) pairs for the table."""
        return [
            ("spark read -> noop", self.read, self.raw_pull),
            ("spark read -> noop", self.read, self.decode),
            ("spark read -> noop", self.read, self.arrow_yield),
            ("spark write (sink)", self.sink, self.producer),
            ("spark write (sink, exactlyOnce)", self.sink_eo, self.producer),
            ("spark write (sink, exactlyOnce)", self.sink_eo, self.sink),
        ]


# -- the servers -------------------------------------------------------------------------------
class _Servers:
    def __init__(self, work: Path, pull_cap: int) -> None:
        self.work = work
        self.pull_cap = pull_cap
        self.ns_port = free_port()
        self.broker_port = free_port(span=2)
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def __enter__(self) -> _Servers:
        self.procs.append(spawn_namesrv(self.work, self.ns_port))
        cap_bytes = max(256 * 1024, self.pull_cap * 1024)
        conf = self.work / "broker.properties"
        conf.write_text(
            "\n".join(
                [
                    f"brokerName={BROKER}",
                    "brokerIP1=127.0.0.1",
                    "listenHost=127.0.0.1",
                    f"listenPort={self.broker_port}",
                    f"namesrvAddr={self.namesrv}",
                    f"storePathRootDir={self.work / 'store'}",
                    "mappedFileSizeCommitLog=268435456",
                    f"maxTransferCountOnMessageInMemory={self.pull_cap}",
                    f"maxTransferBytesOnMessageInMemory={cap_bytes}",
                    f"maxTransferCountOnMessageInDisk={self.pull_cap}",
                    f"maxTransferBytesOnMessageInDisk={cap_bytes}",
                    "",
                ]
            )
        )
        broker = _spawn(["ledgermq.cli.main", "broker", "-c", str(conf)], self.work / "broker.log")
        self.procs.append(broker)
        _wait_port(self.broker_port, broker)
        _wait_route(self.namesrv, "TBW102", broker)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)


async def _create_topic(namesrv: str, broker_addr: str, topic: str, queues: int) -> None:
    from ledgermq.admin.client import AdminClient

    async with AdminClient(namesrv) as admin:
        await admin.create_topic(broker_addr, topic, read_queue_nums=queues, write_queue_nums=queues)
        deadline = time.monotonic() + 30
        while True:
            try:
                route = await admin.route(topic)
                if route.queue_datas:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server never routed {topic}")
            await asyncio.sleep(0.1)


async def _wait_dispatched(namesrv: str, broker_addr: str, topic: str, total: int) -> None:
    """Until the broker's consume queues hold ``total`` messages of ``topic``."""
    from ledgermq.admin.client import AdminClient

    async with AdminClient(namesrv) as admin:
        deadline = time.monotonic() + 300
        while True:
            stats = await admin.topic_stats(broker_addr, topic)
            if sum(v.max_offset for v in stats.values()) >= total:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker dispatched fewer than {total} messages of {topic}")
            await asyncio.sleep(0.2)


# -- baselines without Spark -------------------------------------------------------------------
def pull_all(namesrv: str, topic: str, pull_size: int, decode: bool) -> tuple[int, float]:
    """Every message of ``topic`` pulled by one process (a coroutine per queue): (rows, seconds)."""
    from ledgermq.spark.broker import BrokerSession, PullStatus
    from ledgermq.spark.columnar import RowBuffer

    with BrokerSession([namesrv]) as session:

        async def one(q: Any) -> int:
            buf = RowBuffer(q.topic, q.broker, q.queue_id)
            offset = rows = 0
            while True:
                answer = await session.pull(q, "spark-bench-baseline", offset, pull_size)
                if answer.status is not PullStatus.FOUND:
                    break
                if decode:
                    buf.add(answer.raw, offset, 1 << 62)
                    if len(buf) >= 4096:
                        rows += buf.take().num_rows
                offset = answer.next_offset
            if decode and len(buf):
                rows += buf.take().num_rows
            return rows if decode else offset

        async def run() -> tuple[int, float]:
            queues = await session.queues(topic)
            started = time.perf_counter()
            counts = await asyncio.gather(*(one(q) for q in queues))
            return sum(counts), time.perf_counter() - started

        return session.run(run())


def produce_batches(namesrv: str, topic: str, count: int, body_size: int, batch: int, in_flight: int = 4) -> float:
    """Seconds for our producer to send ``count`` bodies in batches of ``batch``, ``in_flight`` at once."""
    from ledgermq.client import Message, Producer

    async def run() -> float:
        async with Producer("spark-bench-pg", namesrv) as producer:
            body = b"x" * body_size
            left = count
            gate = asyncio.Semaphore(in_flight)

            async def send(n: int) -> None:
                try:
                    await producer.send_batch([Message(topic, body) for _ in range(n)])
                finally:
                    gate.release()

            started = time.perf_counter()
            tasks = []
            while left > 0:
                n = min(batch, left)
                left -= n
                await gate.acquire()
                tasks.append(asyncio.ensure_future(send(n)))
            await asyncio.gather(*tasks)
            return time.perf_counter() - started

    return asyncio.run(run())


# -- Spark ------------------------------------------------------------------------------------------
def _session(master: str) -> tuple[Any, bool]:
    """The SparkSession (an active one is reused, and then not stopped); whether it is ours."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import ledgermq.spark

    active = SparkSession.getActiveSession()
    spark = (
        SparkSession.builder.master(master)
        .appName("ledgermq-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    if active is None:
        spark.sparkContext.setLogLevel("ERROR")
    ledgermq.spark.register(spark)
    spark.dataSource.register(MemoryBatches)
    return spark, active is None


class _Roles:
    """Names the processes of the run for ``proctree.tree_cpu``."""

    def __init__(self, servers: _Servers) -> None:
        self.names = {os.getpid(): "bench process"}
        self.names.update({p.pid: name for p, name in zip(servers.procs, ("namesrv", "broker"), strict=False)})

    def __call__(self, pid: int, command: str) -> str:
        if pid in self.names:
            return self.names[pid]
        return "spark JVM" if command == "java" else "python workers"


def _timed(action: Any, roles: _Roles | None = None, rate: Rate | None = None) -> float:
    from ledgermq.bench.proctree import spent, tree_cpu

    before = tree_cpu(os.getpid(), roles) if roles is not None else {}
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    if roles is not None and rate is not None:
        for k, v in spent(before, tree_cpu(os.getpid(), roles)).items():
            rate.cpu[k] = rate.cpu.get(k, 0.0) + v
    return seconds


def _noop_write(reader: Any) -> Any:
    return lambda: reader.load().write.format("noop").mode("overwrite").save()


def _sample_batch(rows: int, body_size: int) -> Any:
    """A realistic record batch (what the source yields for producer-made messages)."""
    from ledgermq.protocol import properties as P
    from ledgermq.protocol.message import encode_record
    from ledgermq.spark.columnar import RowBuffer
    from ledgermq.util.unique_ids import UniqueIdGenerator

    ids = UniqueIdGenerator()
    now = int(time.time() * 1000)
    raw = b"".join(
        bytes(
            encode_record(
                topic=TOPIC,
                body=b"x" * body_size,
                properties=P.encode_properties({"WAIT": "true", "UNIQ_KEY": ids.next_id(now)}),
                queue_offset=i,
                born_timestamp=now,
                store_timestamp=now,
            )
        )
        for i in range(rows)
    )
    buf = RowBuffer(TOPIC, BROKER, 0)
    buf.add(raw, 0, rows)
    return buf.take()


try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class MemoryBatches(DataSource):
        """The arrow-yield baseline: ``rows`` rows per partition from one prebuilt batch."""

        @classmethod
        def name(cls) -> str:
            return "ledgermq_bench_memory"

        def schema(self) -> Any:
            from ledgermq.spark.source import spark_schema

            return spark_schema()

        def reader(self, schema: Any) -> DataSourceReader:
            return _MemoryReader(int(self.options["rows"]), int(self.options["parts"]), int(self.options["size"]))

    class _MemoryReader(DataSourceReader):
        def __init__(self, rows: int, parts: int, size: int) -> None:
            self.rows, self.parts, self.size = rows, parts, size

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            batch = _sample_batch(4096, self.size)
            left = self.rows // self.parts
            while left > 0:
                n = min(left, batch.num_rows)
                yield batch.slice(0, n)
                left -= n

except ImportError:  # pragma: no cover - pyspark is the 'spark' extra
    MemoryBatches = None  # type: ignore[assignment,misc]


def _measure_reads(
    spark: Any, servers: _Servers, messages: int, body_size: int, queues: int, pull_size: int, repeats: int
) -> tuple[Rate, Rate, Rate, Rate]:
    """The read cases (raw pulls, pull + decode, the Spark read, Spark from memory) in ABBA
    rounds, each timed and its CPU charged by process."""
    ns = servers.namesrv
    roles = _Roles(servers)
    raw = Rate(f"raw pulls of {pull_size}, no decode", messages)
    decode = Rate(f"pulls of {pull_size} + Arrow decode, 1 process", messages)
    read = Rate("spark read -> noop", messages)
    arrow_yield = Rate("spark, Arrow batches from memory -> noop", messages)
    source = spark.read.format("ledgermq").option("namesrvAddr", ns).option("subscribe", TOPIC)
    source = source.option("pullBatchSize", str(pull_size))
    memory = spark.read.format("ledgermq_bench_memory").option("rows", str(messages)).option("parts", str(queues))
    memory = memory.option("size", str(body_size))

    def pulls(rate: Rate, decoded: bool) -> None:
        rate.rows, seconds = pull_all(ns, TOPIC, pull_size, decode=decoded)
        rate.seconds.append(seconds)

    # the cases interleaved, each round in the opposite order of the one before (ABBA), so
    # that a change of the host's load falls on every case alike
    cases: list[tuple[Rate, Any]] = [
        (raw, lambda: pulls(raw, False)),
        (decode, lambda: pulls(decode, True)),
        (read, lambda: read.seconds.append(_timed(_noop_write(source)))),
        (arrow_yield, lambda: arrow_yield.seconds.append(_timed(_noop_write(memory)))),
    ]
    # one untimed read of each Spark case first: the Python workers' start (imports) and the
    # JVM's warm-up belong to no steady-state figure
    _noop_write(source)()
    _noop_write(memory)()
    for round_ in range(repeats):
        for rate, run in cases if round_ % 2 == 0 else reversed(cases):
            _timed(run, roles, rate)
    return raw, decode, read, arrow_yield


def bench_spark(
    messages: int,
    body_size: int,
    *,
    queues: int = 2,
    pull_cap: int = 4096,
    repeats: int = 3,
    master: str = "local[2]",
    workdir: Path | None = None,
) -> SparkBenchResult:
    from ledgermq.bench.procstat import load_average

    load_start = load_average()
    base = workdir or Path(tempfile.mkdtemp(prefix="ledgermq-bench-spark-"))
    base.mkdir(parents=True, exist_ok=True)
    pull_size = min(pull_cap, 2048) if pull_cap > 32 else 32
    try:
        with _Servers(base, pull_cap) as servers:
            ns = servers.namesrv
            asyncio.run(_create_topic(ns, servers.broker_addr, TOPIC, queues))
            for extra in ("Producer", "Eo", "Again"):
                asyncio.run(_create_topic(ns, servers.broker_addr, TOPIC + extra, queues))
            spark, ours = _session(master)
            try:
                from pyspark.sql import functions as F

                sink = Rate("spark write (sink)", messages)
                sink_eo = Rate("spark write (sink, exactlyOnce)", messages)
                frame = spark.range(messages).select(F.lit(b"x" * body_size).alias("value"))

                roles = _Roles(servers)

                def write(topic: str, rate: Rate) -> None:
                    w = frame.write.format("ledgermq").option("namesrvAddr", ns).option("topic", topic)
                    w = w.option("exactlyOnce", "true" if rate is sink_eo else "false").mode("append")
                    rate.seconds.append(_timed(w.save, roles, rate))

                write(TOPIC, sink)  # the first write fills the topic the reads use
                for i in range(repeats):  # alternated: on | off, on | on, off | ...
                    for rate in (sink_eo, sink) if i % 2 == 0 else (sink, sink_eo):
                        if rate is sink_eo or i > 0 or repeats == 1:
                            write(TOPIC + ("Eo" if rate is sink_eo else "Again"), rate)
                asyncio.run(_wait_dispatched(ns, servers.broker_addr, TOPIC, messages))
                producer = Rate("producer, send_batch of 128, 4 in flight", messages // 4)
                producer.seconds.append(produce_batches(ns, TOPIC + "Producer", messages // 4, body_size, 128))

                raw, decode, read, arrow_yield = _measure_reads(
                    spark, servers, messages, body_size, queues, pull_size, repeats
                )
            finally:
                if ours:
                    spark.stop()
        return SparkBenchResult(
            messages,
            body_size,
            queues,
            pull_cap,
            master,
            sink,
            sink_eo,
            producer,
            read,
            raw,
            decode,
            arrow_yield,
            (load_start, load_average()),
        )
    finally:
        if workdir is None:
            shutil.rmtree(base, ignore_errors=True)
