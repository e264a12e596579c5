"""The job ``test_standalone.py`` submits to a standalone cluster (``spark-submit --master spark://...``).

``python standalone_job.py NAMESRV SOURCE TARGET RESULT``: reads every message of SOURCE with ``format("ledgermq")``,
writes their values to TARGET, and writes one JSON document to the file RESULT: the rows read, and where the
executors' Python workers imported ledgermq from (the shipped archive, when the executors' interpreter does not have
it installed). A file and not stdout, because spark-submit's log lines share stdout and stderr with the driver's
prints and one of them can land inside the printed line (seen in CI).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _origin(_rows: Iterator[Any]) -> Iterator[str]:
    import ledgermq

    yield ledgermq.__file__ or "?"


def main(namesrv: str, source: str, target: str, result_file: str) -> None:
    from pyspark.sql import SparkSession

    import ledgermq.spark

    spark = SparkSession.builder.appName("ledgermq-standalone-test").getOrCreate()
    ledgermq.spark.register(spark)
    df = spark.read.format("ledgermq").option("namesrvAddr", namesrv).option("subscribe", source).load()
    rows = df.select("queueId", "queueOffset", "value").collect()
    (
        df.selectExpr("key", "value")
        .write.format("ledgermq")
        .option("namesrvAddr", namesrv)
        .option("topic", target)
        .mode("append")
        .save()
    )
    origins = sorted(set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(_origin).collect()))
    result = {
        "rows": sorted([r.queueId, r.queueOffset, bytes(r.value).decode()] for r in rows),
        "executor_ledgermq": origins,
        "master": spark.sparkContext.master,
    }
    partial = Path(result_file + ".partial")
    partial.write_text(json.dumps(result))
    os.replace(partial, result_file)  # the test reads a whole document or none
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
