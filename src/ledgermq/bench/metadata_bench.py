"""Topic creation rate at scale: ``python -m ledgermq.bench.metadata_bench [COUNT] [DIR]``.

Creates COUNT (default 10,000) topics through ``TopicConfigManager.update`` in-process,
on a real file system, and prints the creation rate of the first and of the last 1,000
(or COUNT/10) topics. Persisting one change must cost O(1): the two rates should be
about equal. With the whole file rewritten per change they fall with the table's size.
The clean shutdown (``close``: a final compaction) is timed separately.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.route import TopicConfig


def run(count: int, directory: Path) -> dict[str, float]:
    config = BrokerConfig(broker_name="bench", cluster_name="benchCluster", listen_port=10911)
    topics = TopicConfigManager(directory / "config" / "topics.json", config, SYSTEM_CLOCK)
    topics.load()
    window = max(1, min(1000, count // 10))
    stamps: list[float] = [time.perf_counter()]
    for i in range(count):
        topics.update(TopicConfig(f"BenchTopic{i:06d}", 8, 8))
        if (i + 1) % window == 0:
            stamps.append(time.perf_counter())
    closed = time.perf_counter()
    close = getattr(topics, "close", None)
    if close is not None:
        close()
    done = time.perf_counter()
    return {
        "topics": count,
        "first_window_per_s": window / (stamps[1] - stamps[0]),
        "last_window_per_s": window / (stamps[-1] - stamps[-2]),
        "overall_per_s": count / (closed - stamps[0]),
        "close_s": done - closed,
    }


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    if len(sys.argv) > 2:
        print(json.dumps(run(count, Path(sys.argv[2]))))
        return
    with tempfile.TemporaryDirectory(prefix="ledgermq-meta-bench-") as tmp:
        print(json.dumps(run(count, Path(tmp))))


if __name__ == "__main__":
    main()
