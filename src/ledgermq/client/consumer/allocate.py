"""Queue allocation strategies of the RocketMQ 4.9.7 client (``consumer/rebalance/``).

At every rebalance each consumer of a clustering group computes, on its own, which of a
topic's queues it should pull. Nobody coordinates the answer: it is correct only because
every member runs the same function over the same inputs and gets complementary slices.
A Python consumer sharing a group with Java (or C++) consumers must therefore reproduce
the Java results exactly, including the odd corners (the consistent-hash ring built from
the first four bytes of an MD5 digest, Java's ``String.split`` dropping trailing empty
fields, ``TreeMap`` ordering by UTF-16 code units).

Inputs are expected sorted the way ``RebalanceImpl`` sorts them before it calls a
strategy: ``mq_all`` by ``MessageQueue.compareTo`` (topic, broker name, queue id) and
``cid_all`` by ``String.compareTo``. ``message_queue_sort_key`` and
``java_string_sort_key`` give exactly those orders. The strategies do not sort for the
caller: Java does not either, and sorting twice would hide a caller that forgot to.

This module is pure (no I/O, no asyncio): allocation is a function of its arguments.
"""

from __future__ import annotations

import hashlib
import logging
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from ledgermq.protocol.admin_body import MessageQueue

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateStrategy",
    "ConsistentHashRouter",
    "HashFunction",
    "MachineRoomResolver",
    "java_string_sort_key",
    "md5_hash",
    "message_queue_sort_key",
    "message_queue_to_string",
    "strategy_by_name",
]

log = logging.getLogger(__name__)

HashFunction = Callable[[str], int]
"""Maps a key to a ring position (Java ``HashFunction.hash``, a signed 64-bit long)."""


class AllocateStrategy(Protocol):
    """What a rebalance needs from a strategy (Java ``AllocateMessageQueueStrategy``)."""

    @property
    def name(self) -> str:
        """The Java ``getName()`` value; the consumer reports it to the broker."""
        ...

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        """The queues of ``mq_all`` that ``current_cid`` should consume."""
        ...


class MachineRoomResolver(Protocol):
    """Where brokers and consumers run (Java ``AllocateMachineRoomNearby.MachineRoomResolver``).

    Both methods must return a non-empty name; an empty one makes ``allocate`` raise,
    as Java does, because a queue or consumer without a room cannot be placed.
    """

    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


# -- orders and text Java uses ----------------------------------------------------------


def java_string_sort_key(text: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo`` (UTF-16 code units, not code points).

    The two orders differ only when a character above U+FFFF meets one in
    U+E000..U+FFFF; big-endian UTF-16 bytes compare exactly like Java's code units.
    """
    return text.encode("utf-16-be", "surrogatepass")


def message_queue_sort_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    """Sort key equal to Java's ``MessageQueue.compareTo`` (topic, broker name, queue id).

    ``MessageQueue``'s own dataclass order compares the same fields with Python's
    code-point order, which agrees for every name RocketMQ accepts (ASCII topic and group
    names); this key is exact for any text.
    """
    return java_string_sort_key(mq.topic), java_string_sort_key(mq.broker_name), mq.queue_id


def message_queue_to_string(mq: MessageQueue) -> str:
    """Java's ``MessageQueue.toString()``: the consistent-hash strategy hashes this text."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def _java_split(text: str, sep: str) -> list[str]:
    """Java ``String.split`` with a literal separator: trailing empty fields are dropped."""
    parts = text.split(sep)
    if len(parts) == 1:
        return parts  # no separator: Java returns the input itself, even when empty
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _check(consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    """Java ``AbstractAllocateMessageQueueStrategy.check``.

    Empty inputs are caller bugs and raise ``ValueError`` (Java: IllegalArgumentException).
    A current client id missing from ``cid_all`` is a transient state (our heartbeat has
    not reached the broker yet), so it yields no queues for this round rather than an error.
    """
    if not current_cid:
        raise ValueError(f"current_cid is empty (consumer group {consumer_group!r})")
    if not mq_all:
        raise ValueError(f"mq_all is empty: no message queue to allocate (consumer group {consumer_group!r})")
    if not cid_all:
        raise ValueError(f"cid_all is empty: no consumer to allocate to (consumer group {consumer_group!r})")
    if current_cid not in cid_all:
        log.info(
            "[BUG] consumer group %s: consumer id %s is not in cid_all %s; it gets no queue this round",
            consumer_group,
            current_cid,
            list(cid_all),
        )
        return False
    return True


# -- the strategies ---------------------------------------------------------------------


class AllocateMessageQueueAveragely:
    """Contiguous blocks (Java ``AllocateMessageQueueAveragely``, the default, "AVG").

    With 8 queues and 3 consumers: [q0 q1 q2] [q3 q4 q5] [q6 q7]; the first
    ``len(mq_all) % len(cid_all)`` consumers take one extra queue. A consumer beyond the
    number of queues gets nothing.
    """

    name = "AVG"

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        n_mq, n_cid = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            average = 1
        elif mod > 0 and index < mod:
            average = n_mq // n_cid + 1
        else:
            average = n_mq // n_cid
        start = index * average if mod > 0 and index < mod else index * average + mod
        count = min(average, n_mq - start)
        return [mq_all[(start + i) % n_mq] for i in range(count)]


class AllocateMessageQueueAveragelyByCircle:
    """Round robin (Java ``AllocateMessageQueueAveragelyByCircle``, "AVG_BY_CIRCLE").

    Consumer ``k`` takes queues ``k, k + n, k + 2n, ...``, which spreads each broker's
    queues over the consumers instead of giving one consumer a whole broker.
    """

    name = "AVG_BY_CIRCLE"

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        return list(mq_all[index :: len(cid_all)])


class AllocateMessageQueueByConfig:
    """A fixed list of queues, whatever the group looks like (Java ``AllocateMessageQueueByConfig``).

    Java does not validate the arguments here (no ``check``), so neither do we. An unset
    list (Java ``null``) is an empty one.
    """

    name = "CONFIG"

    def __init__(self, message_queue_list: Iterable[MessageQueue] = ()) -> None:
        self.message_queue_list: list[MessageQueue] = list(message_queue_list)

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        return list(self.message_queue_list)


class AllocateMessageQueueByMachineRoom:
    """Queues of brokers in the given data centres only (Java ``AllocateMessageQueueByMachineRoom``).

    A broker named ``"<idc>@<name>"`` (exactly two fields after Java's split on ``@``)
    belongs to data centre ``<idc>``; queues of brokers in ``consumer_idcs`` are dealt out
    in blocks of ``len // n`` per consumer, and the remainder one each to the first
    consumers. Queues of other brokers are not consumed by this group member at all.
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs: frozenset[str] = frozenset(consumer_idcs)

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        candidates = []
        for mq in mq_all:
            fields = _java_split(mq.broker_name, "@")
            if len(fields) == 2 and fields[0] in self.consumer_idcs:
                candidates.append(mq)
        n_cid = len(cid_all)
        per, rem = divmod(len(candidates), n_cid)
        result = candidates[per * index : per * index + per]
        if rem > index:
            result.append(candidates[index + per * n_cid])
        return result


class AllocateMachineRoomNearby:
    """Keep traffic inside a machine room when a consumer is there (Java ``AllocateMachineRoomNearby``).

    Queues of a room that has live consumers go only to those consumers (allocated among
    them by ``strategy``); queues of a room without consumers are shared by the whole
    group (``strategy`` over all consumers). The result lists the current consumer's own
    room first, then the consumer-less rooms in Java ``TreeMap`` (code unit) order.
    """

    def __init__(self, strategy: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        self.strategy = strategy
        self.resolver = resolver

    @property
    def name(self) -> str:
        return "MACHINE_ROOM_NEARBY-" + self.strategy.name

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"machine room is empty for message queue {message_queue_to_string(mq)}")
            room_queues.setdefault(room, []).append(mq)
        room_consumers: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"machine room is empty for consumer id {cid}")
            room_consumers.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = self.resolver.consumer_deploy_in(current_cid)
        mine = room_queues.pop(my_room, None)
        if mine:
            result += self.strategy.allocate(consumer_group, current_cid, mine, room_consumers.get(my_room, []))
        for room in sorted(room_queues, key=java_string_sort_key):
            if room not in room_consumers:  # nobody lives there: everyone shares its queues
                result += self.strategy.allocate(consumer_group, current_cid, room_queues[room], cid_all)
        return result


# -- consistent hashing (common/consistenthash) -----------------------------------------


def md5_hash(key: str) -> int:
    """Java ``ConsistentHashRouter.MD5Hash``: the first 4 MD5 bytes, big-endian, unsigned.

    Java hashes ``key.getBytes()`` in the platform charset; UTF-8 on every JVM a broker
    runs on (and the default from Java 18). A lone surrogate becomes ``?``, as Java's
    encoder replaces it.
    """
    digest = hashlib.md5(key.encode("utf-8", "replace"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


class ConsistentHashRouter:
    """A hash ring of physical nodes, each present as virtual nodes ``"<key>-<i>"``.

    Mirrors Java's ``ConsistentHashRouter`` over a ``TreeMap``, including its corners: a
    later virtual node that hashes to an occupied position replaces the earlier one, and
    adding a node again continues its replica numbering after the replicas it still has
    on the ring (so a client id listed twice gets twice the virtual nodes).
    """

    def __init__(self, nodes: Iterable[str], virtual_nodes: int, hash_function: HashFunction = md5_hash) -> None:
        self._hash = hash_function
        self._ring: dict[int, str] = {}
        self._replicas: Counter[str] = Counter()
        self._positions: list[int] | None = None
        for node in nodes:
            self.add_node(node, virtual_nodes)

    def add_node(self, node: str, virtual_nodes: int) -> None:
        if virtual_nodes < 0:
            raise ValueError(f"illegal virtual node count: {virtual_nodes}")
        existing = self._replicas[node]
        for i in range(virtual_nodes):
            position = self._hash(f"{node}-{i + existing}")
            previous = self._ring.get(position)
            if previous is not None:
                self._replicas[previous] -= 1
            self._ring[position] = node
            self._replicas[node] += 1
        self._positions = None

    def remove_node(self, node: str) -> None:
        self._ring = {position: owner for position, owner in self._ring.items() if owner != node}
        self._replicas.pop(node, None)
        self._positions = None

    def route_node(self, key: str) -> str | None:
        """The node owning ``key``: the first virtual node at or after its hash, wrapping."""
        if not self._ring:
            return None
        if self._positions is None:
            self._positions = sorted(self._ring)
        i = bisect_left(self._positions, self._hash(key))
        return self._ring[self._positions[i if i < len(self._positions) else 0]]


class AllocateMessageQueueConsistentHash:
    """Consistent hashing of queues onto consumers (Java ``AllocateMessageQueueConsistentHash``).

    Each consumer id is placed on a ring ``virtual_node_count`` times (default 10, as in
    Java); a queue goes to the owner of the ring position after the hash of its Java
    ``toString()``. When a consumer joins or leaves only the queues next to its virtual
    nodes move, which is the point of choosing this strategy.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_count: int = 10, hash_function: HashFunction | None = None) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtual_node_count: {virtual_node_count}")
        self.virtual_node_count = virtual_node_count
        self.hash_function: HashFunction = hash_function or md5_hash

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        router = ConsistentHashRouter(cid_all, self.virtual_node_count, self.hash_function)
        return [mq for mq in mq_all if router.route_node(message_queue_to_string(mq)) == current_cid]


_SIMPLE: dict[str, Callable[[], AllocateStrategy]] = {
    AllocateMessageQueueAveragely.name: AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle.name: AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash.name: AllocateMessageQueueConsistentHash,
}


def strategy_by_name(name: str) -> AllocateStrategy:
    """A new strategy for a Java ``getName()`` value that needs no configuration.

    CONFIG, MACHINE_ROOM and MACHINE_ROOM_NEARBY-* need a queue list, data centres or a
    resolver; construct those classes directly.
    """
    factory = _SIMPLE.get(name)
    if factory is None:
        raise ValueError(
            f"unknown allocate strategy {name!r}: choose one of {', '.join(_SIMPLE)}"
            " (CONFIG, MACHINE_ROOM and MACHINE_ROOM_NEARBY need configuration: build those classes directly)"
        )
    return factory()
