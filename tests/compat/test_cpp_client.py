"""The Apache RocketMQ C++ client (rocketmq-client-cpp 2.x through the ``rocketmq`` 0.4.4 wheel) against ledgermq.

Each test starts a name server and a broker as processes (fixture ``cluster``) and runs the client in a child
process (``cpp_client.py``). Every message carries a unique id in the user property ``compat_uid``; the tests match
received messages to sent ones by it and compare body, tags, keys and properties exactly.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster, wait_until

pytestmark = pytest.mark.skipif(
    not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4, the 'test' extra) is missing"
)

UID = "compat_uid"
CLIENT_TIMEOUT = 60.0  # whole child process
STEP_TIMEOUT = 30.0  # one consume step
LARGE_BODY = "".join(f"line {i:05d}: ledgermq compat payload äöü ✓\n" for i in range(300))  # > 4 KiB: compressed


def make_messages(
    topic: str, prefix: str, count: int, tags: list[str] | None = None, large_at: int | None = 3, **extra: Any
) -> list[dict]:
    """Messages with varied bodies (unicode; number ``large_at`` > 4 KiB, which the C++ client compresses), tags,
    several keys and user properties."""
    tags = tags or ["TagA", "TagB", "TagC"]
    out = []
    for i in range(count):
        uid = f"{prefix}-{i:03d}"
        body = LARGE_BODY if i == large_at else f"{prefix} message #{i} — ünïcødé ✓ {'x' * (i * 7)}"
        out.append(
            {
                "topic": topic,
                "body": body,
                "tags": tags[i % len(tags)],
                "keys": f"key-{prefix}-{i} alt-{i}",
                "props": {UID: uid, "color": ["red", "green", "blue"][i % 3], "seq": str(i), "note": f"n{i} ä=✓"},
                **extra,
            }
        )
    return out


USER_PROPS = [UID, "color", "seq", "note"]


def uid_of(m: dict) -> str:
    return str(m["props"][UID])


def expected_view(sent: dict, cluster: Cluster, msg_id: str | None = None) -> dict:
    """What a consumer must see for a sent message (UNIQ_KEY is the client's msg id from the send result)."""
    props = {**sent["props"], "CLUSTER": cluster.cluster_name, "TAGS": sent["tags"], "KEYS": sent["keys"]}
    view = {"topic": sent["topic"], "body": sent["body"], "tags": sent["tags"], "keys": sent["keys"], "props": props}
    if msg_id is not None:
        view["props"]["UNIQ_KEY"] = msg_id
        view["id"] = msg_id
    return view


def received_view(rec: dict, with_id: bool) -> dict:
    props = {k: v for k, v in rec["props"].items() if k in (*USER_PROPS, "CLUSTER", "TAGS", "KEYS")}
    if with_id:
        props["UNIQ_KEY"] = rec["props"]["UNIQ_KEY"]
    view = {"topic": rec["topic"], "body": rec["body"], "tags": rec["tags"], "keys": rec["keys"], "props": props}
    if with_id:
        view["id"] = rec["id"]
    return view


def index_once(records: list[dict]) -> dict[str, dict]:
    """uid -> record; fails on duplicates (listing them)."""
    counts = collections.Counter(r["props"][UID] for r in records)
    dups = {u: n for u, n in counts.items() if n > 1}
    assert not dups, f"messages delivered more than once: {dups}"
    return {r["props"][UID]: r for r in records}


def assert_contiguous_queue_offsets(records: list[dict], start: dict[int, int] | None = None) -> None:
    """Per queue, the consumed offsets are exactly start..start+n-1 (nothing skipped, nothing repeated)."""
    per_queue: dict[int, list[int]] = collections.defaultdict(list)
    for r in records:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    for q, offsets in per_queue.items():
        first = (start or {}).get(q, 0)
        assert sorted(offsets) == list(range(first, first + len(offsets))), f"queue {q} offsets {sorted(offsets)}"


def assert_sends_ok(results: list[dict], count: int) -> None:
    assert [r["status"] for r in results] == ["OK"] * count
    ids = [r["msg_id"] for r in results]
    assert all(ids) and len(set(ids)) == count, f"send results need distinct msg ids: {ids}"


def push_step(group: str, topic: str, sent: list[dict], **kw: Any) -> dict:
    return {
        "op": "push",
        "group": group,
        "topic": topic,
        "uid_prop": UID,
        "expect_uids": [uid_of(m) for m in sent],
        "props": USER_PROPS,
        "timeout": STEP_TIMEOUT,
        **kw,
    }


def assert_delivered_exactly(cluster: Cluster, step: dict, sent: list[dict], msg_ids: list[str] | None) -> dict:
    """Every sent message delivered once, exactly as sent; uid -> record."""
    got = index_once(step["messages"])
    want = {uid_of(m) for m in sent}
    missing, unexpected = sorted(want - set(got)), sorted(set(got) - want)
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}{cluster.explain()}"
    with_id = msg_ids is not None
    expected = {uid_of(m): expected_view(m, cluster, msg_ids[i] if msg_ids else None) for i, m in enumerate(sent)}
    actual = {u: received_view(r, with_id) for u, r in got.items()}
    assert actual == expected
    assert all(r["reconsume_times"] == 0 for r in got.values())
    if not with_id:  # the client's UNIQ_KEY is the id consumers see; every message has its own
        assert all(r["id"] == r["props"]["UNIQ_KEY"] and r["id"] for r in got.values())
        assert len({r["id"] for r in got.values()}) == len(got)
    return got


# ---------------------------------------------------------------------------------------------------------------
def test_sync_send_then_push_consume_exact_content(cluster: Cluster) -> None:
    """1. send_sync with tags, keys and user properties to an auto-created topic; a CLUSTERING push consumer gets
    every message once, exactly as sent; a second group subscribed to 'TagA || TagC' gets exactly those."""
    topic = "CompatSync"
    sent = make_messages(topic, "sync", 24)
    tagged = [m for m in sent if m["tags"] in ("TagA", "TagC")]
    send, push, push_tagged = cluster.send_and_consume(
        topic,
        [
            {"op": "send", "mode": "sync", "group": "PG_compat_sync", "messages": sent},
            push_step("CG_compat_sync", topic, sent),
            push_step("CG_compat_sync_tagged", topic, tagged, expression="TagA || TagC"),
        ],
        CLIENT_TIMEOUT,
    )
    assert_sends_ok(send["results"], len(sent))
    msg_ids = [r["msg_id"] for r in send["results"]]
    got = assert_delivered_exactly(cluster, push, sent, msg_ids)
    assert_contiguous_queue_offsets(push["messages"])
    # the send result's queue offset is the one the consumer sees
    assert {uid_of(m): r["offset"] for m, r in zip(sent, send["results"], strict=True)} == {
        u: r["queue_offset"] for u, r in got.items()
    }
    # auto-created with min(4, TBW102's 8) queues, used round-robin by the producer
    assert collections.Counter(r["queue_id"] for r in got.values()) == {0: 6, 1: 6, 2: 6, 3: 6}
    assert_delivered_exactly(cluster, push_tagged, tagged, [msg_ids[sent.index(m)] for m in tagged])


def test_oneway_sends_are_all_consumed(cluster: Cluster) -> None:
    """2. send_oneway: no answer to the client, but every message is stored and later consumed exactly as sent."""
    topic = "CompatOneway"
    sent = make_messages(topic, "oneway", 20)
    send, push = cluster.send_and_consume(
        topic,
        [
            {"op": "send", "mode": "oneway", "group": "PG_compat_oneway", "messages": sent},
            push_step("CG_compat_oneway", topic, sent),
        ],
        CLIENT_TIMEOUT,
    )
    assert send["results"] == []
    assert_delivered_exactly(cluster, push, sent, None)
    assert_contiguous_queue_offsets(push["messages"])


def mul3plus1(arg: int, queues: int) -> int:
    """The child's "mul3plus1" selector."""
    return (arg * 3 + 1) % queues


def test_orderly_sends_keep_per_arg_order(cluster: Cluster) -> None:
    """3. send_orderly with a queue selector: each arg's messages land in the queue the selector chose, in send
    order (increasing queue offsets). A single-threaded concurrent consumer and an orderly consumer (LOCK_BATCH_MQ
    first) both see each arg's messages in that order."""
    topic = "CompatOrderly"
    args, per_arg = 5, 6
    sent = []
    for i in range(args * per_arg):  # interleaved: arg 0,1,2,3,4,0,1,...
        arg, seq = i % args, i // args
        (m,) = make_messages(topic, f"ord{arg}-{seq}", 1, tags=[f"Arg{arg}"], arg=arg)
        m["props"]["seq"] = str(seq)
        sent.append(m)
    send, push, push_orderly = cluster.send_and_consume(
        topic,
        [
            {"op": "send", "mode": "orderly", "selector": "mul3plus1", "group": "PG_compat_ord", "messages": sent},
            push_step("CG_compat_ord", topic, sent, threads=1),
            push_step("CG_compat_ord_orderly", topic, sent, orderly=True),
        ],
        CLIENT_TIMEOUT,
    )
    assert_sends_ok(send["results"], len(sent))
    assert_per_arg_order(cluster, sent, send, push, args, per_arg)
    assert_per_arg_order(cluster, sent, send, push_orderly, args, per_arg)


def assert_per_arg_order(cluster: Cluster, sent: list[dict], send: dict, push: dict, args: int, per_arg: int) -> None:
    got = assert_delivered_exactly(cluster, push, sent, [r["msg_id"] for r in send["results"]])
    assert_contiguous_queue_offsets(push["messages"])
    for arg in range(args):
        mine = [m for m in sent if m["arg"] == arg]  # in send (= seq) order
        recs = [got[uid_of(m)] for m in mine]
        assert {r["queue_id"] for r in recs} == {mul3plus1(arg, 4)}, f"arg {arg}: queue not stable / not selected"
        offsets = [r["queue_offset"] for r in recs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), f"arg {arg}: offsets {offsets}"
        send_offsets = [send["results"][sent.index(m)]["offset"] for m in mine]
        assert send_offsets == offsets
        delivered = [r["props"]["seq"] for r in push["messages"] if r["props"][UID] in {uid_of(m) for m in mine}]
        assert delivered == [str(s) for s in range(per_arg)], f"arg {arg}: delivery order {delivered}"


def test_pull_consumer_reads_everything(cluster: Cluster) -> None:
    """4. PullConsumer.pull over every queue returns every stored message exactly as sent; with the expression
    'TagA' it returns exactly the TagA messages."""
    topic = "CompatPull"
    sent = make_messages(topic, "pull", 20, tags=["TagA", "TagB"])
    tag_a = [m for m in sent if m["tags"] == "TagA"]
    pull = {"op": "pull", "group": "CG_compat_pull", "topic": topic, "props": USER_PROPS, "timeout": STEP_TIMEOUT}
    send, pulled, pulled_a = cluster.send_and_consume(
        topic,
        [
            {"op": "send", "mode": "sync", "group": "PG_compat_pull", "messages": sent},
            {**pull, "expect_count": len(sent)},
            {**pull, "expression": "TagA", "expect_count": len(tag_a)},
        ],
        CLIENT_TIMEOUT,
    )
    assert_sends_ok(send["results"], len(sent))
    msg_ids = [r["msg_id"] for r in send["results"]]
    assert_delivered_exactly(cluster, pulled, sent, msg_ids)
    assert_contiguous_queue_offsets(pulled["messages"])
    assert_delivered_exactly(cluster, pulled_a, tag_a, [msg_ids[sent.index(m)] for m in tag_a])


def test_consumer_progress_survives_broker_restart(cluster: Cluster) -> None:
    """5. Group G consumes the first half; once the broker has persisted G's offsets (the client commits every 5 s,
    the broker flushes every 500 ms here), the consumer stops and the broker stops cleanly (SIGTERM). After a
    restart on the same store, the second half is sent and G, started again, receives exactly the second half:
    nothing committed is redelivered, nothing is lost, and queue offsets continue where they were."""
    topic, group = "CompatRestart", "CG_compat_restart"
    first = make_messages(topic, "first", 16)
    second = make_messages(topic, "second", 16)

    (send1,) = cluster.run_client(
        [{"op": "send", "mode": "sync", "group": "PG_compat_restart", "messages": first}], CLIENT_TIMEOUT
    )
    assert_sends_ok(send1["results"], len(first))
    cluster.wait_route(topic)
    child = cluster.start_client([push_step(group, topic, first, hold=True, settle=0.5)])
    ready = child.wait_ready(STEP_TIMEOUT + 10)
    assert ready["complete"], f"first half not consumed: {ready}{cluster.explain()}"
    # the next offset per queue once everything consumed is acknowledged
    committed = {int(q): n for q, n in ready["next_offsets"].items()}
    assert sum(committed.values()) == len(first)
    wait_until(
        f"the broker to persist {group}'s offsets {committed} in config/consumerOffset.json",
        lambda: cluster.persisted_offsets(group, topic) == committed,
        timeout=20.0,
        interval=0.2,
        describe=lambda: f"persisted: {cluster.persisted_offsets(group, topic)}{cluster.explain()}",
    )
    (push1,) = child.release(timeout=20.0)
    got1 = assert_delivered_exactly(cluster, push1, first, [r["msg_id"] for r in send1["results"]])
    assert collections.Counter(r["queue_id"] for r in got1.values()) == committed

    assert cluster.stop_broker() == 0, f"broker did not stop cleanly on SIGTERM{cluster.explain()}"
    assert cluster.persisted_offsets(group, topic) == committed
    wait_until(
        "the name server to drop the stopped broker",
        lambda: not cluster.broker_registered(require_alive=False),
        15.0,
        0.2,
    )
    cluster.start_broker()
    cluster.wait_route(topic)  # the auto-created topic survived the restart (topics.json) and is registered again

    send2, push2 = cluster.run_client(
        [
            {"op": "send", "mode": "sync", "group": "PG_compat_restart", "messages": second},
            push_step(group, topic, second, settle=2.0),
        ],
        CLIENT_TIMEOUT,
    )
    assert_sends_ok(send2["results"], len(second))
    redelivered = sorted(r["props"][UID] for r in push2["messages"] if r["props"][UID].startswith("first-"))
    assert not redelivered, f"committed messages delivered again after the restart: {redelivered}"
    assert_delivered_exactly(cluster, push2, second, [r["msg_id"] for r in send2["results"]])
    assert_contiguous_queue_offsets(push2["messages"], start=committed)


def run_batches(cluster: Cluster, topic: str, batches: list[list[dict]]) -> tuple[dict, dict]:
    sent = [m for batch in batches for m in batch]
    send, pulled = cluster.send_and_consume(
        topic,
        [
            {"op": "send", "mode": "batch", "group": "PG_compat_batch", "batches": batches},
            {
                "op": "pull",
                "group": "CG_compat_batch",
                "topic": topic,
                "props": USER_PROPS,
                "timeout": STEP_TIMEOUT,
                "expect_count": len(sent),
            },
        ],
        CLIENT_TIMEOUT,
    )
    return send, pulled


def assert_batches_stored_separately(cluster: Cluster, batches: list[list[dict]], send: dict, pulled: dict) -> None:
    assert [r["status"] for r in send["results"]] == ["OK"] * len(batches)
    got = assert_delivered_exactly(cluster, pulled, [m for batch in batches for m in batch], None)
    assert_contiguous_queue_offsets(pulled["messages"])
    for batch, result in zip(batches, send["results"], strict=True):
        recs = [got[uid_of(m)] for m in batch]
        assert len({r["queue_id"] for r in recs}) == 1, "a batch is written to one queue"
        first = recs[0]["queue_offset"]
        assert [r["queue_offset"] for r in recs] == list(range(first, first + len(batch))), "entries contiguous"
        assert result["offset"] == first
        commit_log = [r["commit_log_offset"] for r in recs]
        assert commit_log == sorted(commit_log)


def test_batch_send_stores_separate_messages(cluster: Cluster) -> None:
    """6. send_batch (SEND_MESSAGE_V2 with m="1" from the C++ client) stores each entry as its own message with its
    own tags, keys and properties, contiguously in one queue; the send result's offset is the first entry's."""
    topic = "CompatBatch"
    batches = [make_messages(topic, f"batch{b}", 6, large_at=None) for b in range(2)]
    send, pulled = run_batches(cluster, topic, batches)
    assert_batches_stored_separately(cluster, batches, send, pulled)


def test_compressed_batch_send_stores_separate_messages(cluster: Cluster) -> None:
    """6b. A batch whose encoded body reaches the C++ client's compressMsgBodyOverHowmuch (4096 bytes) is sent
    zlib-compressed as a whole, with sysFlag COMPRESSED; the broker must inflate it before splitting it into
    entries (and store the entries readable by consumers), exactly like a small batch."""
    topic = "CompatBatchZ"
    batches = [make_messages(topic, f"zbatch{b}", 6, large_at=3) for b in range(2)]
    send, pulled = run_batches(cluster, topic, batches)
    assert_batches_stored_separately(cluster, batches, send, pulled)
