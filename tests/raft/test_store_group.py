"""The DLedger pieces together, without a broker: three message stores in DLedger mode,
each driven by a RaftDriver over real loopback sockets, the Raft log written through the
store (``StoreLog``).

What a broker in DLedger mode will rely on: a message proposed on the leader is readable
from every member's consume queue once committed, at the same queue offset, with its
PHYSICALOFFSET naming its own position; a leader stopped mid-stream is replaced and the
queues continue without a gap; the old leader, restarted on its store, catches up and
serves the same queues.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledgermq.net.server import RemotingServer
from ledgermq.protocol import message as M
from ledgermq.raft import NotLeaderError, ProposalDroppedError, Role
from ledgermq.raftio.driver import LeadershipLostError, RaftDriver, RaftDriverConfig
from ledgermq.raftio.store_log import StoreLog
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.testing.ports import HOST, free_port
from tests.store.dledger.mode_helpers import HOST as STORE_HOST
from tests.store.dledger.mode_helpers import TOPIC, bodies_in_queue, dledger_config, encode

QUEUES = 2


@dataclass
class Node:
    node_id: str
    store: MessageStore
    server: RemotingServer
    driver: RaftDriver
    running: bool = True


class StoreGroup:
    def __init__(self, root: Path, *, store_kwargs: dict[str, Any] | None = None, **config_overrides: Any) -> None:
        self.root = root
        self.store_kwargs = store_kwargs or {}
        self.config_overrides = config_overrides
        self.ids = ["n0", "n1", "n2"]
        self.peers = ";".join(f"{n}-{HOST}:{free_port()}" for n in self.ids)
        self.nodes: dict[str, Node] = {}

    async def start_node(self, node_id: str) -> Node:
        cfg = dledger_config(
            self.root / node_id, dleger_self_id=node_id, dleger_peers=self.peers, **self.config_overrides
        )
        store = open_message_store(cfg, store_host=STORE_HOST, **self.store_kwargs)
        await asyncio.to_thread(store.start)
        log = StoreLog(store)
        addr = parse_peers(self.peers)[node_id]
        server = RemotingServer(HOST, int(addr.rsplit(":", 1)[1]), name=f"raft-{node_id}")
        transport = RaftTransport(node_id, parse_peers(self.peers))
        transport.attach(server)
        await server.start()

        def role_changed(role: Role, term: int, leader: str | None) -> None:
            if role is Role.LEADER:  # a new leader assigns queue offsets from what it stores
                store.rebuild_queue_offsets()

        driver = RaftDriver(
            RaftDriverConfig(node_id, self.peers, tick_interval_ms=50, election_timeout_ticks=10),
            log,
            transport,
            on_commit=log.commit,
            on_role_change=role_changed,
            applied=max(store.commitlog.committed_index + 1, 0) if store.commitlog else 0,
        )
        node = Node(node_id, store, server, driver)
        self.nodes[node_id] = node
        await driver.start()
        return node

    async def stop_node(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.running:
            node.running = False
            await node.driver.stop()
            await node.server.stop()
            await asyncio.to_thread(node.store.shutdown)

    def running(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running]

    async def until(self, cond: object, timeout: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not cond():  # type: ignore[operator]
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.01)

    async def send(self, body: bytes, queue_id: int, timeout: float = 5.0) -> tuple[str, int]:
        """What a broker's send processor will do: encode, prepare, propose on the leader,
        retrying elsewhere when it is not (or no longer) the leader. Returns (node, index)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            for node in self.running():
                if node.driver.status().role is not Role.LEADER:
                    continue
                (entry,) = node.store.prepare_append([encode(body, queue_id=queue_id)], TOPIC, queue_id)
                try:
                    async with asyncio.timeout(max(0.05, deadline - loop.time())):
                        return node.node_id, await node.driver.propose(bytes(entry))
                except (NotLeaderError, ProposalDroppedError, LeadershipLostError, TimeoutError):
                    node.store.rebuild_queue_offsets()  # the prepared offset was never used
            await asyncio.sleep(0.01)
        raise AssertionError(f"no leader took {body!r} within {timeout}s")


def queues(store: MessageStore) -> list[list[bytes]]:
    assert store.wait_dispatched(timeout=5)
    return [bodies_in_queue(store, q) for q in range(QUEUES)]


def own_positions_ok(store: MessageStore) -> bool:
    """Every message names its own position (PHYSICALOFFSET), as a pull by offset needs."""
    for q in range(QUEUES):
        got = store.get_message(TOPIC, q, 0, 64)
        for raw in got.messages:
            rec = M.decode_record(raw)
            if store.look_message_by_offset(rec.physical_offset) != bytes(raw):
                return False
    return True


def test_three_stores_in_dledger_mode_agree_across_a_leader_failover(tmp_path: Path) -> None:
    async def main() -> None:
        group = StoreGroup(tmp_path)
        try:
            for n in group.ids:
                await group.start_node(n)
            sent = [f"m-{i:03d}".encode() for i in range(40)]
            leaders = {await group.send(b, i % QUEUES) for b, i in zip(sent, range(40), strict=True)}
            (first_leader,) = {n for n, _ in leaders}

            expected = [[b for i, b in enumerate(sent) if i % QUEUES == q] for q in range(QUEUES)]
            for node in group.running():
                await group.until(lambda n=node: queues(n.store) == expected, 10, f"{node.node_id}'s queues")
                assert own_positions_ok(node.store)

            await group.stop_node(first_leader)  # the leader goes away mid-stream
            more = [f"after-{i:03d}".encode() for i in range(20)]
            took = {await group.send(b, i % QUEUES) for b, i in zip(more, range(20), strict=True)}
            assert {n for n, _ in took} and first_leader not in {n for n, _ in took}
            expected = [e + [b for i, b in enumerate(more) if i % QUEUES == q] for q, e in enumerate(expected)]
            for node in group.running():
                await group.until(lambda n=node: queues(n.store) == expected, 10, f"{node.node_id}'s queues")

            await group.start_node(first_leader)  # back on its store: it catches up
            back = group.nodes[first_leader]
            await group.until(lambda: queues(back.store) == expected, 15, "the old leader to catch up")
            assert own_positions_ok(back.store)
        finally:
            for n in list(group.nodes):
                await group.stop_node(n)

    asyncio.run(main())
