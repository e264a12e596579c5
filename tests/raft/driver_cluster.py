"""Three (or more) real RaftDrivers on 127.0.0.1: DLedgerStores in a tmp dir, remoting servers, transports.

Shared by the driver tests. Every wait is bounded by a deadline; nothing sleeps blindly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgermq.net.server import RemotingServer
from ledgermq.raft import Entry, EntryKind, NotLeaderError, ProposalDroppedError, Role
from ledgermq.raftio.driver import (
    LeadershipLostError,
    RaftDriver,
    RaftDriverConfig,
    RaftStatus,
)
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig
from ledgermq.testing.ports import HOST, free_port

TICK_MS = 50
ELECTION_TICKS = 10


@dataclass
class Member:
    node_id: str
    store: DLedgerStore
    server: RemotingServer
    transport: RaftTransport
    driver: RaftDriver
    applied: list[Entry] = field(default_factory=list)
    roles: list[tuple[Role, int, str | None]] = field(default_factory=list)
    running: bool = True

    @property
    def data(self) -> list[bytes]:
        return [bytes(e.data) for e in self.applied if e.kind is EntryKind.NORMAL]


class DriverCluster:
    def __init__(
        self, root: Path, size: int = 3, storage_cls: type[LedgerStorage] = LedgerStorage, **overrides: Any
    ) -> None:
        self.root = root
        self.storage_cls = storage_cls
        self.ids = [f"n{i}" for i in range(size)]
        self.peers = ";".join(f"{n}-{HOST}:{free_port()}" for n in self.ids)
        self.overrides = {"tick_interval_ms": TICK_MS, "election_timeout_ticks": ELECTION_TICKS, **overrides}
        self.members: dict[str, Member] = {}

    def store_config(self, node_id: str) -> DLedgerStoreConfig:
        return DLedgerStoreConfig(str(self.root), node_id, data_file_size=1 << 20, index_file_size=32 * 4096)

    async def start_node(self, node_id: str) -> Member:
        addr = parse_peers(self.peers)[node_id]
        store = DLedgerStore.open(self.store_config(node_id))
        server = RemotingServer(HOST, int(addr.rsplit(":", 1)[1]), name=f"raft-{node_id}")
        transport = RaftTransport(node_id, parse_peers(self.peers))
        transport.attach(server)
        await server.start()
        cfg = RaftDriverConfig(node_id, self.peers, **self.overrides)
        member: Member
        applied: list[Entry] = []
        roles: list[tuple[Role, int, str | None]] = []
        driver = RaftDriver(
            cfg,
            self.storage_cls(store),
            transport,
            on_commit=applied.extend,
            on_role_change=lambda r, t, ld: roles.append((r, t, ld)),
        )
        member = Member(node_id, store, server, transport, driver, applied, roles)
        self.members[node_id] = member
        await driver.start()
        return member

    async def start(self) -> None:
        for n in self.ids:
            await self.start_node(n)

    async def stop_node(self, node_id: str) -> None:
        m = self.members[node_id]
        if not m.running:
            return
        m.running = False
        await m.driver.stop()
        await m.server.stop()
        m.store.close()

    async def stop(self) -> None:
        for n in list(self.members):
            await self.stop_node(n)

    def running(self) -> list[Member]:
        return [m for m in self.members.values() if m.running]

    async def wait(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred():
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: {self.describe()}")
            await asyncio.sleep(0.01)

    def describe(self) -> str:
        return "; ".join(
            f"{s.id} {s.role.value} t{s.term} lead={s.leader} commit={s.commit} last={s.last_index}"
            for s in (m.driver.status() for m in self.running())
        )

    def leaders(self, among: Sequence[str] | None = None) -> list[Member]:
        ms = [m for m in self.running() if among is None or m.node_id in among]
        return [m for m in ms if m.driver.status().role is Role.LEADER]

    async def wait_leader(self, timeout: float = 5.0, among: Sequence[str] | None = None) -> Member:
        """A leader that every running member of ``among`` follows."""
        group = [m for m in self.running() if among is None or m.node_id in among]

        def agreed() -> bool:
            ls = self.leaders(among)
            return len(ls) == 1 and all(m.driver.status().leader == ls[0].node_id for m in group)

        await self.wait(agreed, timeout, "one agreed leader")
        return self.leaders(among)[0]

    async def propose_anywhere(self, data: bytes, timeout: float = 5.0, among: Sequence[str] | None = None) -> int:
        """Propose on whoever leads, retrying on NotLeader/lost leadership until ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for m in self.leaders(among):
                try:
                    async with asyncio.timeout(max(0.01, deadline - loop.time())):
                        return await m.driver.propose(data)
                except (NotLeaderError, ProposalDroppedError, LeadershipLostError, TimeoutError):
                    pass
            if loop.time() > deadline:
                raise AssertionError(f"no leader took {data!r} within {timeout}s: {self.describe()}")
            await asyncio.sleep(0.005)

    def status(self, node_id: str) -> RaftStatus:
        return self.members[node_id].driver.status()


def stored_log(store: DLedgerStore) -> list[tuple[int, int, bytes]]:
    return [(i, store.get(i).term, store.get(i).body) for i in range(store.first_index, store.last_index + 1)]


def monotonic() -> float:
    return time.monotonic()
