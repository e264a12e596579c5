"""Topic creation rate at scale: ``python -m ledgermq.bench.metadata_bench [COUNT] [--sync-each-change]``.

Creates COUNT (default 10,000) topics through ``TopicConfigManager.update`` in-process,
on a real file system, and prints the creation rate of the first and of the last 1,000
(or COUNT/10) topics. Persisting one change must cost O(1): the two rates should be
about equal. With the whole file rewritten per change they fall with the table's size.
The slowest single creation (one that paid for a compaction) and the clean shutdown
(``close``: a final compaction) are reported separately. ``--sync-each-change`` fsyncs the
change log on every creation (power-loss safe per change; off in the broker).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.metadata_log import MetadataLogSettings
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.route import TopicConfig


def run(count: int, directory: Path, sync_each_change: bool = False) -> dict[str, float]:
    config = BrokerConfig(broker_name="bench", cluster_name="benchCluster", listen_port=10911)
    settings = MetadataLogSettings(sync_each_change=sync_each_change)
    topics = TopicConfigManager(directory / "config" / "topics.json", config, SYSTEM_CLOCK, settings)
    topics.load()
    topics.persist()  # as BrokerApp.start does
    window = max(1, min(1000, count // 10))
    stamps: list[float] = [time.perf_counter()]
    slowest = 0.0
    for i in range(count):
        started = time.perf_counter()
        topics.update(TopicConfig(f"BenchTopic{i:06d}", 8, 8))
        now = time.perf_counter()
        slowest = max(slowest, now - started)
        if (i + 1) % window == 0:
            stamps.append(now)
    closed = time.perf_counter()
    topics.close()
    done = time.perf_counter()
    return {
        "topics": count,
        "first_window_per_s": window / (stamps[1] - stamps[0]),
        "last_window_per_s": window / (stamps[-1] - stamps[-2]),
        "overall_per_s": count / (closed - stamps[0]),
        "slowest_creation_ms": slowest * 1000,
        "close_s": done - closed,
        "snapshot_bytes": topics.path.stat().st_size,
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    count = int(args[0]) if args else 10_000
    with tempfile.TemporaryDirectory(prefix="ledgermq-meta-bench-") as tmp:
        print(json.dumps(run(count, Path(tmp), "--sync-each-change" in sys.argv)))


if __name__ == "__main__":
    main()
