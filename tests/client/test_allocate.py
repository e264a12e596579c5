"""Queue allocation strategies against RocketMQ 4.9.7's Java results.

The tables marked "Java" are what the 4.9.7 classes (``consumer/rebalance/`` with
``common/consistenthash``) return for these inputs, run under a JVM with UTF-8 strings.
The consistent-hash ring is also recomputed here from scratch with hashlib, following
Java's MD5Hash (first four digest bytes, big-endian) and TreeMap ceiling lookup.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.client.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateStrategy,
    ConsistentHashRouter,
    java_string_sort_key,
    md5_hash,
    message_queue_sort_key,
    message_queue_to_string,
    strategy_by_name,
)
from ledgermq.client.message import MessageQueue

G = "group"


def mq(spec: str) -> MessageQueue:
    """``"topic/broker/id"`` -> a queue."""
    topic, broker, qid = spec.rsplit("/", 2)
    return MessageQueue(topic, broker, int(qid))


def mqs(specs: str) -> list[MessageQueue]:
    return [mq(s) for s in specs.split(";") if s]


Q8 = mqs("T/broker-a/0;T/broker-a/1;T/broker-a/2;T/broker-a/3;T/broker-b/0;T/broker-b/1;T/broker-b/2;T/broker-b/3")
C3 = ["10.0.0.1@1", "10.0.0.2@2", "10.0.0.3@3"]


# -- names, argument checks -------------------------------------------------------------


class RoomByPrefix:
    """Rooms are the text before the first '-' of the broker name / client id."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-")[0]


def test_names_are_javas_get_name() -> None:
    assert AllocateMessageQueueAveragely().name == "AVG"
    assert AllocateMessageQueueAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateMessageQueueByConfig().name == "CONFIG"
    assert AllocateMessageQueueByMachineRoom({"hz"}).name == "MACHINE_ROOM"
    assert AllocateMessageQueueConsistentHash().name == "CONSISTENT_HASH"
    nearby = AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), RoomByPrefix())
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


ALL_CHECKED: list[AllocateStrategy] = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueByMachineRoom({"broker"}),
    AllocateMessageQueueConsistentHash(),
    AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomByPrefix()),
]


@pytest.mark.parametrize("strategy", ALL_CHECKED, ids=lambda s: s.name)
def test_empty_inputs_raise_value_error(strategy: AllocateStrategy) -> None:
    with pytest.raises(ValueError, match="current_cid is empty"):
        strategy.allocate(G, "", Q8, C3)
    with pytest.raises(ValueError, match="mq_all is empty"):
        strategy.allocate(G, C3[0], [], C3)
    with pytest.raises(ValueError, match="cid_all is empty"):
        strategy.allocate(G, C3[0], Q8, [])


@pytest.mark.parametrize("strategy", ALL_CHECKED, ids=lambda s: s.name)
def test_a_consumer_missing_from_cid_all_gets_nothing_and_it_is_logged(
    strategy: AllocateStrategy, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="ledgermq.client.consumer.allocate"):
        assert strategy.allocate(G, "stranger", Q8, C3) == []
    assert "stranger" in caplog.text and "[BUG]" in caplog.text


def test_config_returns_its_list_without_checking_anything() -> None:
    fixed = mqs("T/b/3;T/a/1")
    strategy = AllocateMessageQueueByConfig(fixed)
    assert strategy.allocate(G, "", [], []) == fixed  # Java does not call check() here
    result = strategy.allocate(G, "c", Q8, ["c"])
    result.append(mq("X/x/0"))
    assert strategy.message_queue_list == fixed  # callers get a copy
    assert AllocateMessageQueueByConfig().allocate(G, "c", Q8, ["c"]) == []


# -- known Java results -----------------------------------------------------------------

JAVA_8_QUEUES_3_CONSUMERS = {
    # cid: (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH (10 virtual nodes), CONSISTENT_HASH (3 virtual nodes))
    "10.0.0.1@1": (
        "T/broker-a/0;T/broker-a/1;T/broker-a/2",
        "T/broker-a/0;T/broker-a/3;T/broker-b/2",
        "T/broker-a/3",
        "T/broker-a/1;T/broker-a/2;T/broker-b/1",
    ),
    "10.0.0.2@2": (
        "T/broker-a/3;T/broker-b/0;T/broker-b/1",
        "T/broker-a/1;T/broker-b/0;T/broker-b/3",
        "T/broker-a/2",
        "T/broker-a/0;T/broker-a/3;T/broker-b/2",
    ),
    "10.0.0.3@3": (
        "T/broker-b/2;T/broker-b/3",
        "T/broker-a/2;T/broker-b/1",
        "T/broker-a/0;T/broker-a/1;T/broker-b/0;T/broker-b/1;T/broker-b/2;T/broker-b/3",
        "T/broker-b/0;T/broker-b/3",
    ),
}


@pytest.mark.parametrize("cid", sorted(JAVA_8_QUEUES_3_CONSUMERS))
def test_java_results_for_8_queues_and_3_consumers(cid: str) -> None:
    avg, circle, ch10, ch3 = (mqs(x) for x in JAVA_8_QUEUES_3_CONSUMERS[cid])
    assert AllocateMessageQueueAveragely().allocate(G, cid, Q8, C3) == avg
    assert AllocateMessageQueueAveragelyByCircle().allocate(G, cid, Q8, C3) == circle
    assert AllocateMessageQueueConsistentHash().allocate(G, cid, Q8, C3) == ch10
    assert AllocateMessageQueueConsistentHash(3).allocate(G, cid, Q8, C3) == ch3


def test_avg_with_more_consumers_than_queues_leaves_the_last_ones_idle() -> None:
    three = mqs("T/b/0;T/b/1;T/b/2")
    cids = [f"c{i}" for i in range(5)]
    got = [AllocateMessageQueueAveragely().allocate(G, c, three, cids) for c in cids]
    assert got == [[three[0]], [three[1]], [three[2]], [], []]  # Java


def test_avg_10_queues_4_consumers_sizes_like_javas_own_test() -> None:
    queues = [MessageQueue("topic", "brokerName", i) for i in range(10)]
    cids = [f"CID_PREFIX{i}" for i in range(4)]
    sizes = [len(AllocateMessageQueueAveragely().allocate(G, c, queues, cids)) for c in cids]
    assert sizes == [3, 3, 2, 2]


def test_machine_room_uses_javas_split_on_at() -> None:
    # "hz@x@" splits into two fields in Java (the trailing empty one is dropped); "x@@" into one.
    queues = mqs(
        "T/broker-c/0;T/hz@broker-a/0;T/hz@broker-a/1;T/hz@broker-a/2;T/hz@x@/0;T/sh@broker-b/0;T/sh@broker-b/1;T/x@@/0"
    )
    cids = ["c0", "c1", "c2"]
    strategy = AllocateMessageQueueByMachineRoom({"hz"})
    got = {c: strategy.allocate(G, c, queues, cids) for c in cids}
    assert got == {  # Java
        "c0": mqs("T/hz@broker-a/0;T/hz@x@/0"),
        "c1": mqs("T/hz@broker-a/1"),
        "c2": mqs("T/hz@broker-a/2"),
    }
    assert AllocateMessageQueueByMachineRoom({"bj"}).allocate(G, "c0", queues, cids) == []


def test_machine_room_nearby_keeps_queues_in_the_room_and_shares_orphans() -> None:
    queues = mqs("T/hz-a/0;T/hz-a/1;T/hz-a/2;T/hz-a/3;T/sh-b/0;T/sh-b/1;T/sh-b/2;T/sh-b/3;T/sz-c/0;T/sz-c/1;T/sz-c/2")
    cids = ["hz-1", "hz-2", "sh-1"]
    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomByPrefix())
    got = {c: strategy.allocate(G, c, queues, cids) for c in cids}
    assert got == {  # Java
        "hz-1": mqs("T/hz-a/0;T/hz-a/1;T/sz-c/0"),
        "hz-2": mqs("T/hz-a/2;T/hz-a/3;T/sz-c/1"),
        "sh-1": mqs("T/sh-b/0;T/sh-b/1;T/sh-b/2;T/sh-b/3;T/sz-c/2"),
    }


def test_machine_room_nearby_refuses_an_unplaced_queue_or_consumer() -> None:
    class Blank(RoomByPrefix):
        def broker_deploy_in(self, mq: MessageQueue) -> str:
            return "" if mq.broker_name == "nowhere" else super().broker_deploy_in(mq)

    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), Blank())
    with pytest.raises(ValueError, match="machine room is empty for message queue"):
        strategy.allocate(G, "hz-1", mqs("T/hz-a/0;T/nowhere/0"), ["hz-1"])
    with pytest.raises(ValueError, match="machine room is empty for consumer id -x"):
        strategy.allocate(G, "hz-1", mqs("T/hz-a/0"), ["-x", "hz-1"])


def test_consistent_hash_duplicate_client_ids_get_more_virtual_nodes() -> None:
    # Java numbers the second copy's virtual nodes c1-10..c1-19.
    strategy = AllocateMessageQueueConsistentHash()
    assert strategy.allocate(G, "c1", Q8, ["c1", "c1", "c2"]) == mqs(  # Java
        "T/broker-a/0;T/broker-a/1;T/broker-a/3;T/broker-b/0;T/broker-b/1;T/broker-b/2;T/broker-b/3"
    )
    assert strategy.allocate(G, "c2", Q8, ["c1", "c1", "c2"]) == mqs("T/broker-a/2")  # Java
    assert strategy.allocate(G, "c1", Q8, ["c1", "c2"]) == mqs(  # Java
        "T/broker-a/0;T/broker-a/3;T/broker-b/0;T/broker-b/1;T/broker-b/3"
    )


# -- consistent hashing details ---------------------------------------------------------


def test_md5_hash_is_the_first_four_digest_bytes_unsigned() -> None:
    assert md5_hash("abc") == 0x90015098  # md5("abc") = 900150983cd24fb0...
    assert md5_hash("") == 0xD41D8CD9  # md5("") = d41d8cd98f00b204...
    assert md5_hash("中") == int.from_bytes(hashlib.md5("中".encode()).digest()[:4], "big")


def test_message_queue_to_string_is_javas() -> None:
    assert message_queue_to_string(MessageQueue("T", "b", 3)) == "MessageQueue [topic=T, brokerName=b, queueId=3]"


def naive_consistent_hash(
    cid_all: Sequence[str], vnodes: int, mq_all: Sequence[MessageQueue]
) -> dict[MessageQueue, str]:
    """An independent ring: hash every virtual node, later ones overwrite equal positions."""

    def h(key: str) -> int:
        return int(hashlib.md5(key.encode("utf-8")).hexdigest()[:8], 16)

    ring: dict[int, str] = {}
    for cid in cid_all:
        # Replica numbers continue after the copies of the same id already on the ring.
        start = sum(1 for other in ring.values() if other == cid)
        for r in range(vnodes):
            ring[h(f"{cid}-{start + r}")] = cid
    owners: dict[MessageQueue, str] = {}
    positions = sorted(ring)
    for q in mq_all:
        x = h(f"MessageQueue [topic={q.topic}, brokerName={q.broker_name}, queueId={q.queue_id}]")
        after = [p for p in positions if p >= x]
        owners[q] = ring[after[0] if after else positions[0]]
    return owners


def test_consistent_hash_matches_an_independent_ring() -> None:
    queues = [
        MessageQueue(t, b, i) for t in ("TopicTest", "%RETRY%cg") for b in ("broker-a", "broker-b") for i in range(8)
    ]
    cids = [f"192.168.0.{i}@{1000 + i}" for i in range(5)]
    for vnodes in (1, 3, 10, 40):
        owners = naive_consistent_hash(cids, vnodes, queues)
        strategy = AllocateMessageQueueConsistentHash(vnodes)
        for cid in cids:
            assert strategy.allocate(G, cid, queues, cids) == [q for q in queues if owners[q] == cid]


def test_consistent_hash_with_no_virtual_nodes_allocates_nothing() -> None:
    assert AllocateMessageQueueConsistentHash(0).allocate(G, C3[0], Q8, C3) == []
    with pytest.raises(ValueError, match="virtual_node_count"):
        AllocateMessageQueueConsistentHash(-1)


def test_router_collisions_keep_the_last_virtual_node_and_replica_numbering_follows_the_ring() -> None:
    hashed: list[str] = []

    def zero(key: str) -> int:
        hashed.append(key)
        return 0

    router = ConsistentHashRouter(["a", "b"], 2, zero)
    assert router.route_node("anything") == "b"  # every vnode landed on 0; b's came last
    assert hashed[:4] == ["a-0", "a-1", "b-0", "b-1"]
    hashed.clear()
    router.add_node("a", 2)  # a has no replica left on the ring: numbering restarts at 0
    router.add_node("a", 1)  # now a holds position 0 (one replica): continues at 1
    assert hashed[:3] == ["a-0", "a-1", "a-1"]
    assert router.route_node("x") == "a"
    router.remove_node("a")
    assert router.route_node("x") is None
    with pytest.raises(ValueError):
        router.add_node("c", -1)


def test_custom_hash_function() -> None:
    positions = {"c1-0": 100, "c2-0": 200}

    def h(key: str) -> int:
        return positions.get(key, 150 if key.endswith("queueId=0]") else 250)

    strategy = AllocateMessageQueueConsistentHash(1, h)
    two = mqs("T/b/0;T/b/1")
    assert strategy.allocate(G, "c2", two, ["c1", "c2"]) == [two[0]]  # 150 -> 200
    assert strategy.allocate(G, "c1", two, ["c1", "c2"]) == [two[1]]  # 250 wraps to 100


# -- ordering helpers, registry ---------------------------------------------------------


def test_sort_keys_follow_javas_utf16_order() -> None:
    emoji, fullwidth_a = "\U0001f600", "\uff21"  # Java: D83D DE00 < FF21; code points say the opposite
    assert sorted([fullwidth_a, emoji], key=java_string_sort_key) == [emoji, fullwidth_a]
    queues = [MessageQueue("T", fullwidth_a, 0), MessageQueue("T", emoji, 1), MessageQueue("S", "z", 9)]
    assert sorted(queues, key=message_queue_sort_key) == [queues[2], queues[1], queues[0]]
    plain = [
        MessageQueue("T", "b", 10),
        MessageQueue("T", "b", 2),
        MessageQueue("T", "a", 5),
        MessageQueue("A", "z", 0),
    ]
    assert sorted(plain, key=message_queue_sort_key) == sorted(plain)  # same as the dataclass order for ASCII


def test_strategy_by_name() -> None:
    assert isinstance(strategy_by_name("AVG"), AllocateMessageQueueAveragely)
    assert isinstance(strategy_by_name("AVG_BY_CIRCLE"), AllocateMessageQueueAveragelyByCircle)
    ch = strategy_by_name("CONSISTENT_HASH")
    assert isinstance(ch, AllocateMessageQueueConsistentHash) and ch.virtual_node_count == 10
    assert strategy_by_name("AVG") is not strategy_by_name("AVG")
    for name in ("CONFIG", "MACHINE_ROOM", "avg", ""):
        with pytest.raises(ValueError, match="unknown allocate strategy"):
            strategy_by_name(name)


# -- properties -------------------------------------------------------------------------

queue_lists = st.lists(
    st.builds(MessageQueue, st.sampled_from(["T", "U"]), st.sampled_from(["a", "b", "c"]), st.integers(0, 15)),
    min_size=1,
    max_size=40,
    unique=True,
).map(lambda qs: sorted(qs, key=message_queue_sort_key))
cid_lists = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12, unique=True).map(
    lambda cs: sorted(cs, key=java_string_sort_key)
)


def allocations(
    strategy: AllocateStrategy, queues: list[MessageQueue], cids: list[str]
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate(G, cid, queues, cids) for cid in cids}


def assert_partition(result: dict[str, list[MessageQueue]], queues: list[MessageQueue]) -> None:
    counts = Counter(q for got in result.values() for q in got)
    assert set(counts) == set(queues), "every queue has a consumer"
    assert all(n == 1 for n in counts.values()), "no queue has two consumers"


@pytest.mark.parametrize(
    "strategy",
    [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(), AllocateMessageQueueConsistentHash()],
    ids=lambda s: s.name,
)
@settings(max_examples=150, deadline=None)
@given(queues=queue_lists, cids=cid_lists)
def test_every_queue_goes_to_exactly_one_consumer(
    strategy: AllocateStrategy, queues: list[MessageQueue], cids: list[str]
) -> None:
    assert_partition(allocations(strategy, queues, cids), queues)


@pytest.mark.parametrize(
    "strategy", [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()], ids=lambda s: s.name
)
@settings(max_examples=150, deadline=None)
@given(queues=queue_lists, cids=cid_lists)
def test_average_strategies_balance_within_one(
    strategy: AllocateStrategy, queues: list[MessageQueue], cids: list[str]
) -> None:
    sizes = [len(got) for got in allocations(strategy, queues, cids).values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == len(queues)


@settings(max_examples=150, deadline=None)
@given(queues=queue_lists, cids=cid_lists)
def test_avg_hands_out_contiguous_blocks_in_consumer_order(queues: list[MessageQueue], cids: list[str]) -> None:
    result = allocations(AllocateMessageQueueAveragely(), queues, cids)
    assert [q for cid in cids for q in result[cid]] == queues


@settings(max_examples=100, deadline=None)
@given(
    queues=queue_lists,
    cids=st.lists(st.sampled_from(["a", "b", "c", "x"]), min_size=1, max_size=8).map(
        lambda rooms: sorted((f"{room}-{i}" for i, room in enumerate(rooms)), key=java_string_sort_key)
    ),
)
def test_machine_room_nearby_partitions_when_the_inner_strategy_does(
    queues: list[MessageQueue], cids: list[str]
) -> None:
    class Rooms:
        def broker_deploy_in(self, mq: MessageQueue) -> str:
            return mq.broker_name

        def consumer_deploy_in(self, client_id: str) -> str:
            return client_id.split("-")[0]

    result = allocations(AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), Rooms()), queues, cids)
    assert_partition(result, queues)
    rooms_with_consumers = {c.split("-")[0] for c in cids}
    for cid, got in result.items():
        for q in got:  # a queue in a room with consumers stays in that room
            assert q.broker_name not in rooms_with_consumers or q.broker_name == cid.split("-")[0]


@settings(max_examples=100, deadline=None)
@given(queues=queue_lists, cids=cid_lists, vnodes=st.integers(1, 12))
def test_consistent_hash_equals_the_independent_ring(queues: list[MessageQueue], cids: list[str], vnodes: int) -> None:
    owners = naive_consistent_hash(cids, vnodes, queues)
    strategy = AllocateMessageQueueConsistentHash(vnodes)
    for cid in cids:
        assert strategy.allocate(G, cid, queues, cids) == [q for q in queues if owners[q] == cid]
