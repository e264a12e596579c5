"""A streaming pipeline on Spark with ledgermq: events in, a windowed count, results back to a topic.

    python examples/spark_pipeline.py                      # starts its own name server and broker
    python examples/spark_pipeline.py --namesrv host:9876  # or uses yours (needs a broker with autoCreateTopicEnable)

1. A producer thread sends click events (JSON ``{"user", "page"}``) to the topic ``ClickEvents``.
2. A Structured Streaming query reads them with ``format("ledgermq")``, counts clicks per page in
   5-second windows of the broker's store time, and writes each window's final counts as JSON to the
   topic ``PageCounts`` with the ``ledgermq`` sink (append mode: a window is written once the
   2-second watermark has passed it; progress committed to the group ``page-counts-job``).
3. After ``--seconds`` the query stops and a batch query reads ``PageCounts`` back and prints it.

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
from pathlib import Path

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


def produce(namesrv: str, stop: threading.Event) -> None:
    from ledgermq.client import Message, Producer

    async def run() -> None:
        async with Producer("click-producer", namesrv) as producer:
            n = 0
            while not stop.is_set():
                clicks = [{"user": f"u{random.randrange(50)}", "page": random.choice(PAGES)} for _ in range(50)]
                batch = [Message(EVENTS, json.dumps(c).encode()) for c in clicks]
                await producer.send_batch(batch)
                n += len(batch)
                await asyncio.sleep(0.1)
            print(f"producer: {n} events sent")

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv", help="name servers (host:port;...); default: start a local cluster")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the streaming query runs")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ledgermq-spark-example-"))
    procs: list[subprocess.Popen[bytes]] = []
    broker_addr = None
    if args.namesrv:
        namesrv = args.namesrv
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

        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(namesrv, stop), daemon=True)
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
        time.sleep(args.seconds)
        stop.set()
        producer.join(10)
        query.stop()
        print(f"streaming query: {sum(p['numInputRows'] for p in query.recentProgress)} events in "
              f"{len(query.recentProgress)} micro-batches")  # fmt: skip

        results = (
            spark.read.format("ledgermq").option("namesrvAddr", namesrv).option("subscribe", COUNTS).load()
            .select(F.col("value").cast("string").alias("count"), "storeTimestamp")
            .orderBy("storeTimestamp")
        )  # fmt: skip
        print(f"{results.count()} window counts in {COUNTS}; the last ones:")
        for row in results.tail(10):
            print("  ", row["count"])
        spark.stop()
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
