"""What a SQL92 pull costs per message the filter rejects, measured on a real store.

``python -m ledgermq.bench.filter_bench [--messages N] [--bodies 100,1024,4096]`` fills a
throwaway store with messages none of which match ``a > 1000 AND region = 'eu'``, then
pulls them all through ``NativeMessageStore.get_message`` three ways, in the same run:

* ``decode``: read each whole record and decode it (``decode_record``), then evaluate:
  the straightforward way, and the baseline;
* ``record``: read each whole record, parse only its properties section, evaluate;
* ``props`` (what the broker does for a message dispatched before the expression was
  first used): read only the properties section of each record
  (``CommitLog.properties_at``), never the body, look up only the properties the
  expression names, then evaluate;
* ``cached`` (what the broker does once the expression is in use): the answer was
  computed when the message was dispatched (``DispatchMatchCache``), so the pull reads
  nothing of the record; ``dispatch`` is what that evaluation added per message to the
  reput thread;
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

from ledgermq.broker.filter_cache import DispatchMatchCache
from ledgermq.clock import SystemClock
from ledgermq.config import StoreConfig
from ledgermq.filter import compile_expression
from ledgermq.protocol.message import decode_record
from ledgermq.protocol.properties import encode_properties
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.message_filter import MessageFilter, PropertyFilter, TagFilter
from ledgermq.store.message_input import MessageInput
from ledgermq.store.native_store import NativeMessageStore

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


def _drain(store: NativeMessageStore, topic: str, count: int, message_filter: MessageFilter) -> float:
    """Seconds to pull the whole queue (nothing matches: every pull skips its whole window)."""
    start = time.perf_counter()
    offset = 0
    while offset < count:
        result = store.get_message(topic, 0, offset, 32, message_filter)
        assert result.message_count == 0, "the bench's messages must not match"
        offset = result.next_begin_offset
    return time.perf_counter() - start


def _dispatch_cost(cache: DispatchMatchCache, topic: str, store: NativeMessageStore, count: int) -> float:
    """µs per message ``on_dispatch`` spends evaluating (replaying the queue's records)."""
    reqs = []
    for record in store.get_message(topic, 0, 0, 32).messages[:32]:
        rec = decode_record(record, check_crc=False)
        reqs.append(
            DispatchRequest(
                rec.topic, rec.queue_id, 0, rec.store_size, 0, rec.store_timestamp, rec.queue_offset, rec.sysflag,
                None, None, 0, encode_properties(rec.properties),
            )
        )  # fmt: skip
    rounds = max(1, count // len(reqs))
    start = time.perf_counter()
    for _ in range(rounds):
        for req in reqs:
            cache.on_dispatch(req)
    return (time.perf_counter() - start) / (rounds * len(reqs)) * 1e6


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
    cache = DispatchMatchCache(SystemClock())
    root = Path(tempfile.mkdtemp(prefix="ledgermq-filter-bench-"))
    out = []
    try:
        store = NativeMessageStore(StoreConfig(root_dir=str(root)))
        store.add_dispatch_hook(cache.on_dispatch)
        store.start()
        try:
            for size in body_sizes:
                topic = f"Bench{size}"
                cache.watch(topic, compiled)
                body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
                for n in range(messages):
                    props = {"a": str(n % 1000), "region": "us", "TAGS": "t", "KEYS": f"k{n}", "UNIQ_KEY": f"{n:032X}"}
                    store.put_message(MessageInput(topic, body, properties=props))
                assert store.wait_dispatched(None, 30.0)
                ways["cached"] = PropertyFilter(predicate, compiled.names, cache.verdict_of(topic, 0, compiled))
                figures = {}
                for way, flt in ways.items():
                    best = min(_drain(store, topic, messages, flt) for _ in range(rounds))
                    figures[way] = best / messages * 1e6
                figures["dispatch"] = _dispatch_cost(cache, topic, store, messages)
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
    ways = ("decode", "record", "props", "cached", "tag", "dispatch")
    print(f"{'body':>7} " + " ".join(f"{w:>8}" for w in ways))
    for size, f in run(args.messages, sizes):
        print(f"{size:>7} " + " ".join(f"{f[w]:>8.2f}" for w in ways))


if __name__ == "__main__":
    main()
