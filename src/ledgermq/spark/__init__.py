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
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

NAME = "ledgermq"

__all__ = ["NAME", "register"]


def register(spark: SparkSession | RemoteSparkSession) -> None:
    """Make ``format("ledgermq")`` available in ``spark`` (``spark.dataSource.register``).

    ``spark`` may be a Spark Connect session (``SparkSession.builder.remote(...)``): the
    class is then pickled by reference and sent to the server, whose Python workers import
    ``ledgermq`` themselves (docs/spark.md, "Spark Connect")."""
    from ledgermq.spark.source import LedgerMQDataSource

    spark.dataSource.register(LedgerMQDataSource)
