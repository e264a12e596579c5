"""A streaming pipeline on Spark with ledgermq: events in, a windowed count, results back to a topic.

    python examples/spark_pipeline.py                      # starts its own name server and broker
    python examples/spark_pipeline.py --namesrv host:9876  # or uses yours (needs a broker with autoCreateTopicEnable)

1. A producer thread sends ``--events`` click events (JSON ``{"user", "page"}``) to the topic
   ``ClickEvents``, 50 every 0.1 s.
2. A Structured Streaming query reads them with ``format("ledgermq")``, counts clicks per page in
   5-second windows of the broker's store time, and writes each window's final counts as JSON to the
   topic ``PageCounts`` with the ``ledgermq`` sink (append mode: a window is written once the
   2-second watermark has passed it; progress committed to the group ``page-counts-job``).
3. Once the query has read every event sent (its progress reports, polled; at most ``--timeout``
   seconds, so a slow machine still finishes, a fast one sooner) it stops, and a batch query
   reads ``PageCounts`` back and prints it.

Exits 1 with the reason when the query did not read every event in time, died, or the
producer failed: "0 events in 0 micro-batches" is a failure, not a result.

Needs ``pip install 'ledgermq[spark]'`` and Java 17 or 21.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ledgermq.testing.ports import free_port

EVENTS, COUNTS, GROUP = "ClickEvents", "PageCounts", "page-counts-job"
PAGES = ["/", "/cart", "/checkout", "/search", "/help"]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


def start_servers(work: Path) -> tuple[str, str, list[subprocess.Popen[bytes]]]:
    """A name server and a broker (``ledgermq namesrv`` / ``ledgermq broker``) under ``work``."""
    ns_port, broker_port = free_port(), free_port(span=2)  # the broker's HA port is listenPort + 1
    ledgermq = [sys.executable, "-m", "ledgermq.cli.main"]
    log = open(work / "servers.log", "ab")  # noqa: SIM115 - kept by the children
    ns = subprocess.Popen([*ledgermq, "namesrv", "-p", str(ns_port)], stdout=log, stderr=subprocess.STDOUT)
    wait_port(ns_port)
    conf = work / "broker.properties"
    conf.write_text(
        f"brokerName=example-broker\nbrokerIP1=127.0.0.1\nlistenPort={broker_port}\n"
        f"namesrvAddr=127.0.0.1:{ns_port}\nstorePathRootDir={work / 'store'}\n"
        "mappedFileSizeCommitLog=67108864\nmaxTransferCountOnMessageInMemory=1024\n"
    )
    broker = subprocess.Popen([*ledgermq, "broker", "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    wait_port(broker_port)
    return f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", [broker, ns]


async def create_topics(namesrv: str, broker_addr: str | None) -> None:
    from ledgermq.admin.client import AdminClient

    async with AdminClient(namesrv) as admin:
        deadline = time.monotonic() + 30
        while True:  # until the broker has registered
            try:
                info = await admin.cluster_info()
                masters = [a for c in info.cluster_addr_table for a in info.master_addrs(c)]
                if masters:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("no broker registered with the name server")
            await asyncio.sleep(0.2)
        for topic in (EVENTS, COUNTS):
            for addr in [broker_addr] if broker_addr else masters:
                await admin.create_topic(addr, topic, read_queue_nums=2, write_queue_nums=2)
        while True:
            try:
                await admin.route(EVENTS)
                await admin.route(COUNTS)
                return
            except Exception:
                await asyncio.sleep(0.2)


@dataclass
class Produced:
    """What the producer thread did; read by the main thread after ``join``."""

    sent: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def produce(namesrv: str, total: int, out: Produced) -> None:
    """Send ``total`` events, 50 every 0.1 s; a failure is kept in ``out`` for the main thread."""
    from ledgermq.client import Message, Producer

    async def run() -> None:
        async with Producer("click-producer", namesrv) as producer:
            while out.sent < total:
                n = min(50, total - out.sent)
                clicks = [{"user": f"u{random.randrange(50)}", "page": random.choice(PAGES)} for _ in range(n)]
                await producer.send_batch([Message(EVENTS, json.dumps(c).encode()) for c in clicks])
                out.sent += n
                await asyncio.sleep(0.1)

    try:
        asyncio.run(run())
    except BaseException as exc:  # reported by main, which exits non-zero
        out.error = exc
    finally:
        out.done.set()


class StreamingQueryLike(Protocol):
    """The part of ``pyspark.sql.streaming.StreamingQuery`` the wait uses (tests pass a fake)."""

    @property
    def isActive(self) -> bool: ...  # pyspark's name

    @property
    def recentProgress(self) -> Sequence[Any]: ...  # dicts, or StreamingQueryProgress in pyspark 4  # pyspark's name

    def exception(self) -> Any: ...


@dataclass
class Progress:
    """Rows the query read, counted once per micro-batch id (``recentProgress`` keeps only the
    last 100 reports, so the polls accumulate them)."""

    rows_by_batch: dict[int, int] = field(default_factory=dict)

    def add(self, reports: Iterable[Any]) -> None:
        for report in reports:
            self.rows_by_batch[int(report["batchId"])] = int(report["numInputRows"] or 0)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_batch.values())

    @property
    def batches(self) -> int:
        return sum(1 for n in self.rows_by_batch.values() if n > 0)


def wait_for_input(
    query: StreamingQueryLike,
    expected: Callable[[], int | None],
    timeout: float,
    poll: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Progress, str | None]:
    """Poll the query's progress until it has read ``expected()`` rows (None: the producer
    is not done yet, so keep waiting), the query died, or ``timeout`` seconds passed.
    Returns the progress and None on success, else the reason of the failure."""
    progress = Progress()
    deadline = clock() + timeout
    while True:
        progress.add(query.recentProgress)
        target = expected()
        if target is not None and progress.rows >= target:
            return progress, None
        if not query.isActive:
            error = query.exception()
            return progress, f"the streaming query stopped after {progress.rows} events: {error}"
        if clock() >= deadline:
            waiting_for = "the producer to finish" if target is None else f"{target} events"
            return progress, (
                f"the streaming query read {progress.rows} events in {progress.batches} micro-batches "
                f"within {timeout:.0f}s, waiting for {waiting_for}"
            )
        sleep(poll)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv", help="name servers (host:port;...); default: start a local cluster")
    parser.add_argument("--events", type=int, default=5000, help="events to send (default: 5000, about 10 s)")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for the query to read them all (default: 180)"
    )
    args = parser.parse_args()
    sys.exit(run(args.namesrv, args.events, args.timeout))


def run(namesrv_arg: str | None, total: int, timeout: float) -> int:
    """The whole example; 0 when the query read every event sent, else 1 (the reason printed)."""
    work = Path(tempfile.mkdtemp(prefix="ledgermq-spark-example-"))
    procs: list[subprocess.Popen[bytes]] = []
    broker_addr = None
    if namesrv_arg:
        namesrv = namesrv_arg
    else:
        namesrv, broker_addr, procs = start_servers(work)
        print(f"name server {namesrv}, broker {broker_addr}, data in {work}")
    try:
        asyncio.run(create_topics(namesrv, broker_addr))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        import ledgermq.spark

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("ledgermq-example")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        ledgermq.spark.register(spark)

        produced = Produced()
        producer = threading.Thread(target=produce, args=(namesrv, total, produced), daemon=True)
        producer.start()

        events = (
            spark.readStream.format("ledgermq")
            .option("namesrvAddr", namesrv)
            .option("subscribe", EVENTS)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "5000")
            .option("groupId", GROUP)
            .load()
        )
        clicks = events.select(
            F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"), "storeTimestamp"
        )
        counts = (
            clicks.withWatermark("storeTimestamp", "2 seconds")
            .groupBy(F.window("storeTimestamp", "5 seconds"), "page")
            .count()
        )
        query = (
            counts.select(
                F.col("page").alias("key"),
                F.to_json(F.struct(F.col("window.start").alias("window"), "page", "count")).alias("value"),
            )
            .writeStream.format("ledgermq")
            .option("namesrvAddr", namesrv)
            .option("topic", COUNTS)
            .option("checkpointLocation", str(work / "checkpoint"))
            .outputMode("append")  # a window is written once the watermark has passed it
            .trigger(processingTime="2 seconds")
            .start()
        )
        progress, failure = wait_for_input(
            query, lambda: produced.sent if produced.done.is_set() and produced.error is None else None, timeout
        )
        if produced.error is not None:
            failure = f"the producer failed after {produced.sent} events: {produced.error!r}"
        query.stop()
        print(f"producer: {produced.sent} events sent")
        print(f"streaming query: {progress.rows} events in {progress.batches} micro-batches")
        if failure is not None:
            print(f"FAILED: {failure}", file=sys.stderr)
            spark.stop()
            return 1

        results = (
            spark.read.format("ledgermq").option("namesrvAddr", namesrv).option("subscribe", COUNTS).load()
            .select(F.col("value").cast("string").alias("count"), "storeTimestamp")
            .orderBy("storeTimestamp")
        )  # fmt: skip
        # append mode: the newest windows are still open (the watermark has not passed them)
        print(f"{results.count()} closed window counts in {COUNTS}; the last ones:")
        for row in results.tail(10):
            print("  ", row["count"])
        spark.stop()
        return 0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
