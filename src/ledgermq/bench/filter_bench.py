"""What a SQL92 pull costs per message the filter rejects, measured on a real store.

``python -m ledgermq.bench.filter_bench [--messages N] [--bodies 100,1024,4096]`` fills a
throwaway store with messages none of which match ``a > 1000 AND region = 'eu'``, then
pulls them all through ``MessageStore.get_message`` three ways, in the same run:

* ``decode``: read each whole record and decode it (``decode_record``), then evaluate:
  the straightforward way, and the baseline;
* ``record``: read each whole record, parse only its properties section, evaluate;
* ``props`` (what the broker does): read only the properties section of each record
  (``CommitLog.properties_at``), never the body, look up only the properties the
  expression names, then evaluate;
* ``tag`` (for scale): a TAG subscription rejecting the same messages by consume-queue
  tag code alone, without touching the commit log.

It prints microseconds per rejected message for each way and body size.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ledgermq.config import StoreConfig
from ledgermq.filter import compile_expression
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_filter import MessageFilter, PropertyFilter, TagFilter
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore

EXPRESSION = "a > 1000 AND region = 'eu'"


class _DecodeFilter:
    """The baseline: every record decoded whole before the expression sees its properties."""

    def __init__(self, predicate: Callable[[Mapping[str, str]], bool]) -> None:
        self.predicate = predicate

    def matches_tags_code(self, tags_code: int) -> bool:
        return True

    def matches_record(self, record: bytes) -> bool:
        return self.predicate(decode_record(record, check_crc=False).properties)


class _RecordFilter(_DecodeFilter):
    """The whole record read, only its properties parsed (PropertyFilter.matches_record)."""

    def __init__(self, predicate: Callable[[Mapping[str, str]], bool]) -> None:
        super().__init__(predicate)
        self._inner = PropertyFilter(predicate)  # all properties split into a dict

    def matches_record(self, record: bytes) -> bool:
        return self._inner.matches_record(record)


def _drain(store: MessageStore, topic: str, count: int, message_filter: MessageFilter) -> float:
    """Seconds to pull the whole queue (nothing matches: every pull skips its whole window)."""
    start = time.perf_counter()
    offset = 0
    while offset < count:
        result = store.get_message(topic, 0, offset, 32, message_filter)
        assert result.message_count == 0, "the bench's messages must not match"
        offset = result.next_begin_offset
    return time.perf_counter() - start


def run(messages: int, body_sizes: list[int], rounds: int = 3) -> list[tuple[int, dict[str, float]]]:
    """[(body size, {way: µs per rejected message})], best of ``rounds``."""
    compiled = compile_expression(EXPRESSION)
    predicate = compiled.matches
    ways: dict[str, MessageFilter] = {
        "decode": _DecodeFilter(predicate),
        "record": _RecordFilter(predicate),
        "props": PropertyFilter(predicate, compiled.names),
        "tag": TagFilter(["no-such-tag"]),
    }
    root = Path(tempfile.mkdtemp(prefix="ledgermq-filter-bench-"))
    out = []
    try:
        store = MessageStore(StoreConfig(root_dir=str(root)))
        store.start()
        try:
            for size in body_sizes:
                topic = f"Bench{size}"
                body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
                for n in range(messages):
                    props = {"a": str(n % 1000), "region": "us", "TAGS": "t", "KEYS": f"k{n}", "UNIQ_KEY": f"{n:032X}"}
                    store.put_message(MessageInput(topic, body, properties=props))
                assert store.wait_dispatched(None, 30.0)
                figures = {}
                for way, flt in ways.items():
                    best = min(_drain(store, topic, messages, flt) for _ in range(rounds))
                    figures[way] = best / messages * 1e6
                out.append((size, figures))
        finally:
            store.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--bodies", default="100,1024,4096,16384")
    args = parser.parse_args()
    sizes = [int(s) for s in args.bodies.split(",")]
    print(f"expression: {EXPRESSION}; {args.messages} non-matching messages per body size; µs per message")
    print(f"{'body':>7} {'decode':>8} {'record':>8} {'props':>8} {'tag':>8} {'props/decode':>13}")
    for size, f in run(args.messages, sizes):
        ratio = f["props"] / f["decode"]
        print(f"{size:>7} {f['decode']:>8.2f} {f['record']:>8.2f} {f['props']:>8.2f} {f['tag']:>8.2f} {ratio:>13.2f}")


if __name__ == "__main__":
    main()
