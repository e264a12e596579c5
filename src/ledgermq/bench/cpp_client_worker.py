"""Child process for ``ledgermq bench produce|consume`` driving the Apache C++ client.

Runs in its own process because the C++ client (the ``rocketmq`` wheel) starts native
threads. Prints one JSON line: counts, elapsed seconds and per-send latencies (ms).
Usage: python -m ledgermq.bench.cpp_client_worker produce|consume NAMESRV TOPIC COUNT SIZE
"""

from __future__ import annotations

import json
import sys
import threading
import time


def produce(namesrv: str, topic: str, count: int, size: int) -> dict[str, object]:
    from rocketmq.client import Message, Producer

    producer = Producer(f"bench-producer-{int(time.time() * 1000)}")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    body = b"x" * size
    try:
        warm = Message(topic)
        warm.set_body(body)
        producer.send_sync(warm)  # route lookup and connection set-up stay out of the timing
        latencies = []
        started = time.perf_counter()
        for _ in range(count):
            msg = Message(topic)
            msg.set_body(body)
            t0 = time.perf_counter()
            producer.send_sync(msg)
            latencies.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - started
    finally:
        producer.shutdown()
    return {"count": count, "seconds": elapsed, "latencies_ms": latencies}


def consume(namesrv: str, topic: str, count: int, _size: int) -> dict[str, object]:
    from rocketmq.client import PushConsumer

    got = 0
    first: float | None = None
    done = threading.Event()
    lock = threading.Lock()
    latencies: list[float] = []
    born: list[int] = []

    def on_message(msg: object) -> None:
        nonlocal got, first
        delivered_ms = time.time() * 1000  # end-to-end: born (producer clock, same host) to here
        with lock:
            if first is None:
                first = time.perf_counter()
            born.append(msg.born_timestamp)  # type: ignore[attr-defined]
            latencies.append(delivered_ms - msg.born_timestamp)  # type: ignore[attr-defined]
            got += 1
            if got >= count:
                done.set()

    consumer = PushConsumer(f"bench-consumer-{int(time.time() * 1000)}")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message, "*")
    consumer.start()
    print("READY", flush=True)
    try:
        done.wait(300)
        end = time.perf_counter()
    finally:
        consumer.shutdown()
    return {"count": got, "seconds": end - (first or end), "latencies_ms": latencies, "born_ms": born}


def main() -> None:
    mode, namesrv, topic, count, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    result = (produce if mode == "produce" else consume)(namesrv, topic, count, size)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
