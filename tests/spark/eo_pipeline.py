"""The driver of the Spark fault test: a streaming query copying one topic to another through
the ledgermq sink, on a standalone cluster, from a checkpoint. Run as a process of its own
(``python -m tests.spark.eo_pipeline ...``) so the test can SIGKILL it and start it again.

``--mode run`` keeps triggering micro-batches until it is killed; ``--mode drain`` reads what
is there (``availableNow``), exits 0 when the query finished and 3 when it failed. It writes
through ``fault_points.NAME`` (the ledgermq sink whose commit points the test can arm).
"""

from __future__ import annotations

import argparse
import os
import sys

# Spark gives the driver's Python worker of a streaming source a fixed 10 s to start and
# connect back (tests/spark/queries.py); on a loaded two-core host the interpreter's imports
# alone can take longer. Only that failure restarts the query, at most this many times.
WORKER_START_RETRIES = 5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--master", required=True)
    p.add_argument("--namesrv", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--exactly-once", choices=("true", "false"), required=True)
    p.add_argument("--max-per-trigger", type=int, default=500)
    p.add_argument("--mode", choices=("run", "drain"), default="run")
    args = p.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    import ledgermq.spark
    from tests.spark.fault_points import NAME, FaultPointDataSource
    from tests.spark.queries import worker_start_failed

    spark = (
        SparkSession.builder.master(args.master)
        .appName("ledgermq-eo-faults")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.executor.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "20")
        .config("spark.deploy.maxExecutorRetries", "1000")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    ledgermq.spark.register(spark)
    spark.dataSource.register(FaultPointDataSource)
    frame = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", args.namesrv)
        .option("subscribe", args.src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .option("pollTimeoutMs", "60000")
        .load()
        .selectExpr("key", "value")
    )
    writer = (
        frame.writeStream.format(NAME)
        .option("namesrvAddr", args.namesrv)
        .option("topic", args.dst)
        .option("exactlyOnce", args.exactly_once)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.mode == "drain":
        writer = writer.trigger(availableNow=True)
    for attempt in range(1, WORKER_START_RETRIES + 2):
        query = writer.start()
        print(f"query {query.id} started (attempt {attempt})", flush=True)
        try:
            query.awaitTermination()
        except StreamingQueryException:
            pass  # a failed query raises here; query.exception() has it
        failed = query.exception()
        print(f"query ended: {failed}", flush=True)
        if failed is None or not worker_start_failed(query):
            break
        # restarting from the checkpoint is what any supervisor of a streaming query does
        print("the query failed because Spark's Python worker started too slowly: restarting it", flush=True)
    spark.stop()
    return 3 if failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
