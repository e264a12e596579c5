"""PySpark data source ``ledgermq`` (batch and Structured Streaming source and sink).

``pip install ledgermq[spark]`` brings pyspark (4.2 or later) and pyarrow; then::

    import ledgermq.spark
    ledgermq.spark.register(spark)
    df = spark.read.format("ledgermq").option("namesrvAddr", "127.0.0.1:9876").option("subscribe", "T").load()

See docs/spark.md for the options, the schema and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "ledgermq"

__all__ = ["NAME", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("ledgermq")`` available in ``spark`` (``spark.dataSource.register``)."""
    from ledgermq.spark.source import LedgerMQDataSource

    spark.dataSource.register(LedgerMQDataSource)
