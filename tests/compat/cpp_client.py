"""Child process that drives the Apache RocketMQ C++ client (``rocketmq`` wheel) and prints JSON.

Usage: ``python cpp_client.py SPEC.json``. The spec is ``{"namesrv": "host:port", "steps": [...]}``; the steps run
in order and each appends one entry to the result. Steps:

* ``{"op": "send", "mode": "sync"|"oneway"|"orderly"|"batch", "group": G, "messages": [MSG, ...],
  "max_message_size"?: N, "retry_failed_sends"?: N}`` (the client's own limit defaults to 128 KiB; a sync send
  that raises is sent again up to N times, each retry listed under ``"retried"``); for "batch",
  ``"batches": [[MSG, ...], ...]`` instead. MSG = ``{"topic", "body", "tags"?, "keys"?, "props"?: {k: v}, "arg"?}``;
  orderly sends use ``arg`` with the queue selector named by ``"selector"`` (see SELECTORS).
* ``{"op": "push", "group", "topic", "expression"?, "uid_prop", "expect_uids": [...], "props": [names], "timeout",
  "settle"?, "hold"?, "threads"?, "orderly"?}``: a CLUSTERING push consumer (an orderly listener if asked) that
  runs until every expected uid arrived (then ``settle`` more seconds, to catch duplicates) or until ``timeout``.
  With ``hold`` it then prints ``READY <json>`` and keeps consuming until a line arrives on stdin.
* ``{"op": "pull", "group", "topic", "expression"?, "expect_count", "props", "timeout"}``: PullConsumer.pull passes
  (each continues from the offsets the previous one reached) until ``expect_count`` messages or ``timeout``.

Optional ``"credentials": {"access_key", "secret_key", "channel"?}`` (at the top of the spec, or in a step to
override it) makes every client call ``set_session_credentials`` (ACL: the C++ client then signs every request;
channel defaults to "ALIYUN", the client's own default). A sync send step with ``"expect_error": true`` records
each send's exception text under ``"errors"`` instead of failing the child.

The last stdout line is ``RESULT <json>``. The process leaves with ``os._exit`` after shutting the clients down, so
the native library's destructors never run at interpreter exit.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ProducerSendSyncFailed

# Properties every record reports besides the ones the spec names.
SYSTEM_PROPS = ("UNIQ_KEY", "CLUSTER", "TAGS", "KEYS")


def _arg_value(arg: Any) -> int:
    return int(ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0])


SELECTORS = {
    # arg * 3 + 1 modulo the queue count: not the identity, so the test can tell the selector was honoured.
    "mul3plus1": lambda mq_size, _msg, arg: (_arg_value(arg) * 3 + 1) % mq_size,
    "modulo": lambda mq_size, _msg, arg: _arg_value(arg) % mq_size,
}


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "backslashreplace")


def record(msg: RecvMessage, props: list[str]) -> dict[str, Any]:
    return {
        "topic": msg.topic,
        "body": _text(msg.body),
        "tags": _text(msg.tags),
        "keys": _text(msg.keys),
        "props": {name: _text(msg.get_property(name)) for name in [*props, *SYSTEM_PROPS]},
        "id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commit_log_offset": msg.commit_log_offset,
        "reconsume_times": msg.reconsume_times,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "received_ms": int(time.time() * 1000),  # when the listener saw it (timer lateness)
    }


def make_message(spec: dict[str, Any]) -> Message:
    msg = Message(spec["topic"])
    msg.set_body(spec["body"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    for k, v in (spec.get("props") or {}).items():
        msg.set_property(k, v)
    return msg


def _send_result(res: Any) -> dict[str, Any]:
    return {"status": res.status.name, "msg_id": res.msg_id, "offset": res.offset}


def apply_credentials(client: Producer | PushConsumer | PullConsumer, step: dict[str, Any]) -> None:
    creds = step.get("credentials")
    if creds:
        client.set_session_credentials(creds["access_key"], creds["secret_key"], creds.get("channel", "ALIYUN"))


def run_send(namesrv: str, step: dict[str, Any]) -> dict[str, Any]:
    producer = Producer(step["group"], max_message_size=step.get("max_message_size"))
    producer.set_namesrv_addr(namesrv)
    apply_credentials(producer, step)
    producer.start()
    results: list[dict[str, Any]] = []
    retried: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        mode = step["mode"]
        if mode == "batch":
            for batch in step["batches"]:
                results.append(_send_result(producer.send_batch([make_message(m) for m in batch])))
        else:
            for index, m in enumerate(step["messages"]):
                msg = make_message(m)
                if mode == "sync" and step.get("expect_error"):
                    try:
                        results.append(_send_result(producer.send_sync(msg)))
                    except ProducerSendSyncFailed as exc:
                        errors.append(str(exc)[:2000])
                elif mode == "sync":
                    results.append(_send_result(_send_sync(producer, msg, index, step, retried)))
                elif mode == "oneway":
                    producer.send_oneway(msg)
                elif mode == "orderly":
                    selector = SELECTORS[step.get("selector", "modulo")]
                    results.append(_send_result(producer.send_orderly(msg, m["arg"], queue_selector=selector)))
                else:
                    raise ValueError(f"unknown send mode {mode!r}")
    finally:
        producer.shutdown()
    return {"op": "send", "results": results, "retried": retried, "errors": errors}


def _send_sync(
    producer: Producer, msg: Message, index: int, step: dict[str, Any], retried: list[dict[str, Any]]
) -> Any:
    """``send_sync``, sent again up to ``step["retry_failed_sends"]`` times (default 0) when it
    raises, as an application would. The wheel's client fails a send at once when another of
    its threads holds its connection table ("GetTransport ... get timed_mutex timeout", then
    "No route info of this topic"), which a loaded machine makes likely right after start;
    since a failed send may still have been stored, every retry is reported and the test
    allows that many extra copies."""
    for attempt in range(int(step.get("retry_failed_sends", 0)) + 1):
        try:
            return producer.send_sync(msg)
        except ProducerSendSyncFailed as exc:
            if attempt == int(step.get("retry_failed_sends", 0)):
                raise
            retried.append({"index": index, "attempt": attempt, "error": str(exc)[:300]})
            time.sleep(0.5)
    raise AssertionError("unreachable")


def run_push(namesrv: str, step: dict[str, Any]) -> dict[str, Any]:
    uid_prop = step["uid_prop"]
    props = sorted({uid_prop, *step.get("props", [])})
    expected = set(step["expect_uids"])
    got: list[dict[str, Any]] = []
    seen: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def on_message(msg: RecvMessage) -> None:
        rec = record(msg, props)
        with lock:
            got.append(rec)
            seen.add(rec["props"][uid_prop])
            if expected <= seen:
                done.set()

    consumer = PushConsumer(step["group"], orderly=bool(step.get("orderly")), message_model=MessageModel.CLUSTERING)
    consumer.set_namesrv_addr(namesrv)
    apply_credentials(consumer, step)
    if step.get("threads"):
        consumer.set_thread_count(step["threads"])
    consumer.subscribe(step["topic"], on_message, step.get("expression", "*"))
    started = time.monotonic()
    consumer.start()
    complete = done.wait(step["timeout"]) if expected else True
    if complete:
        time.sleep(step.get("settle", 1.0))
    if step.get("hold"):
        with lock:
            next_offsets: dict[int, int] = {}
            for rec in got:
                next_offsets[rec["queue_id"]] = max(next_offsets.get(rec["queue_id"], 0), rec["queue_offset"] + 1)
            summary = {"complete": complete, "count": len(got), "next_offsets": next_offsets}
        print("READY " + json.dumps(summary), flush=True)
        sys.stdin.readline()
    consumer.shutdown()
    with lock:
        return {"op": "push", "complete": complete, "elapsed": time.monotonic() - started, "messages": list(got)}


def run_pull(namesrv: str, step: dict[str, Any]) -> dict[str, Any]:
    props = sorted(step.get("props", []))
    consumer = PullConsumer(step["group"])
    consumer.set_namesrv_addr(namesrv)
    apply_credentials(consumer, step)
    consumer.start()
    consumer.offset_table.clear()  # a class attribute in the wheel: start every pull step from offset 0
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + step["timeout"]
    passes = 0
    try:
        while len(got) < step["expect_count"] and time.monotonic() < deadline:
            passes += 1
            got.extend(record(m, props) for m in consumer.pull(step["topic"], step.get("expression", "*")))
            if len(got) < step["expect_count"]:
                time.sleep(0.2)
    finally:
        consumer.shutdown()
    return {"op": "pull", "passes": passes, "messages": got}


STEPS = {"send": run_send, "push": run_push, "pull": run_pull}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    out: list[dict[str, Any]] = []
    try:
        for step in spec["steps"]:
            if "credentials" in spec and "credentials" not in step:
                step = {**step, "credentials": spec["credentials"]}
            out.append(STEPS[step["op"]](spec["namesrv"], step))
    except Exception:
        traceback.print_exc()
        print("RESULT " + json.dumps({"error": traceback.format_exc(), "steps": out}), flush=True)
        sys.stderr.flush()
        os._exit(1)
    print("RESULT " + json.dumps({"steps": out}), flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
