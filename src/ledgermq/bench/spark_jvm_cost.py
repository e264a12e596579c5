"""Where Spark's JVM spends its CPU on a read: ``python -m ledgermq.bench.spark_jvm_cost``.

``ledgermq bench spark`` found the JVM spending 1.3-2 us per row whether the rows come from
the ledgermq source or from a Python source that yields prebuilt Arrow batches, and
concluded that a read cannot reach 0.8x raw pulls on 2 cores. That rests on the JVM's cost
being Spark's, not the source's or the query's. This measures it directly, per case, as CPU
seconds (user + system from /proc) of each process per row, the cases alternated in ABBA
rounds in one session, the host's load average printed beside:

* the ledgermq source into the ``noop`` sink (what ``bench spark`` runs) and into
  ``count()``;
* prebuilt batches of the same 12-column schema, into ``noop`` and ``count()``, at Arrow
  batch sizes of 1024, 4096 and 16384 rows;
* prebuilt batches of fewer columns (``value`` alone, ``key`` + ``value``): what the JVM
  would spend if the source could be asked for fewer columns.

One name server and one broker (pull caps raised as in ``bench spark``) hold ``--messages``
messages of ``--body-size`` bytes sent by our producer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ledgermq.bench.procstat import load_average
from ledgermq.bench.spark_bench import (
    TOPIC,
    Rate,
    _create_topic,
    _noop_write,
    _Roles,
    _sample_batch,
    _Servers,
    _session,
    _timed,
    _wait_dispatched,
    produce_batches,
)

COLUMN_SETS = {"all": None, "value": ["value"], "key+value": ["key", "value"]}

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ShapedBatches(DataSource):
        """Prebuilt batches of ``batch`` rows, of all the source's columns or of ``columns``."""

        @classmethod
        def name(cls) -> str:
            return "ledgermq_bench_shaped"

        def schema(self) -> Any:
            from pyspark.sql.types import StructType

            from ledgermq.spark.source import spark_schema

            full = spark_schema()
            wanted = _columns(self.options)
            return full if wanted is None else StructType([full[c] for c in wanted])

        def reader(self, schema: Any) -> DataSourceReader:
            o = self.options
            return _ShapedReader(int(o["rows"]), int(o["parts"]), int(o["size"]), int(o["batch"]), _columns(o))

    class _ShapedReader(DataSourceReader):
        def __init__(self, rows: int, parts: int, size: int, batch: int, columns: list[str] | None) -> None:
            self.rows, self.parts, self.size, self.batch, self.columns = rows, parts, size, batch, columns

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            batch = _sample_batch(self.batch, self.size)
            if self.columns is not None:
                batch = batch.select(self.columns)
            left = self.rows // self.parts
            while left > 0:
                n = min(left, batch.num_rows)
                yield batch.slice(0, n)
                left -= n

except ImportError:  # pragma: no cover - pyspark is the 'spark' extra
    ShapedBatches = None  # type: ignore[assignment,misc]


def _columns(options: Any) -> list[str] | None:
    wanted = options.get("columns", "all")
    return COLUMN_SETS[wanted]


def measure(messages: int, body_size: int, repeats: int, queues: int = 2, pull_cap: int = 4096) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="ledgermq-bench-jvm-"))
    load_start = load_average()
    try:
        with _Servers(base, pull_cap) as servers:
            ns = servers.namesrv
            asyncio.run(_create_topic(ns, servers.broker_addr, TOPIC, queues))
            produce_batches(ns, TOPIC, messages, body_size, 128)
            asyncio.run(_wait_dispatched(ns, servers.broker_addr, TOPIC, messages))
            spark, ours = _session("local[2]")
            spark.dataSource.register(ShapedBatches)
            try:
                source = spark.read.format("ledgermq").option("namesrvAddr", ns).option("subscribe", TOPIC)
                source = source.option("pullBatchSize", str(min(pull_cap, 2048)))

                def shaped(batch: int, columns: str = "all") -> Any:
                    r = spark.read.format("ledgermq_bench_shaped").option("rows", str(messages))
                    r = r.option("parts", str(queues)).option("size", str(body_size)).option("batch", str(batch))
                    return r.option("columns", columns)

                def count(reader: Any) -> Callable[[], None]:
                    return lambda: reader.load().count()

                cases: list[tuple[str, Callable[[], None]]] = [
                    ("ledgermq -> noop", _noop_write(source)),
                    ("ledgermq -> count()", count(source)),
                    ("prebuilt 4096 -> noop", _noop_write(shaped(4096))),
                    ("prebuilt 4096 -> count()", count(shaped(4096))),
                    ("prebuilt 1024 -> noop", _noop_write(shaped(1024))),
                    ("prebuilt 16384 -> noop", _noop_write(shaped(16384))),
                    ("prebuilt 4096, value only -> noop", _noop_write(shaped(4096, "value"))),
                    ("prebuilt 4096, key+value -> noop", _noop_write(shaped(4096, "key+value"))),
                ]
                for _name, run in cases:  # warm-up: worker imports, JIT
                    run()
                roles = _Roles(servers)
                rates = {name: Rate(name, messages) for name, _ in cases}
                for round_ in range(repeats):
                    for name, run in cases if round_ % 2 == 0 else list(reversed(cases)):
                        rate = rates[name]
                        rate.seconds.append(_timed(run, roles, rate))
                        print(f"  {name}: {rate.seconds[-1]:.2f}s, load {load_average():.1f}", flush=True)
            finally:
                if ours:
                    spark.stop()
        return {
            "messages": messages,
            "body_size": body_size,
            "repeats": repeats,
            "load": [load_start, load_average()],
            "cases": {name: {"us_per_row": r.us_per_row(), "best_s": r.best} for name, r in rates.items()},
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--body-size", type=int, default=100)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    result = measure(a.messages, a.body_size, a.repeats)
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{a.messages} rows, load average {result['load'][0]:.1f} -> {result['load'][1]:.1f}")
    roles = ("spark JVM", "python workers", "broker")
    print(f"{'case':40} " + " ".join(f"{r:>15}" for r in roles) + "  (CPU us per row)")
    for name, c in result["cases"].items():
        us = c["us_per_row"]
        print(f"{name:40} " + " ".join(f"{us.get(r, 0.0):15.2f}" for r in roles))


if __name__ == "__main__":
    main()
