"""``DLedgerLayout``: a name server and a 3-broker DLedger (Raft) group as real processes.

Brokers n0, n1 and n2 run in DLedger mode (``enableDLegerCommitLog=true``) in one group;
the Raft leader registers with the name server as the master (brokerId 0), followers as
slaves (n<k> -> brokerId k + 1). ``current_master`` asks the name server which node is
registered as brokerId 0 (None during an election, or when the registered one is not
running).

**Partitions between Raft peers without root.** Each node gets its own ``dLegerPeers``:
itself at its real Raft port on 127.0.0.1, and every other node j at the listen address
of a fault proxy for the link i->j (on 127.0.0.2, which Linux routes to loopback) that
forwards to j's real Raft port. Every Raft message node i sends to j crosses the proxy
"raft:ni->nj" (the transport sends one-way batches, answers travel on the reverse link),
so cutting the links to and from one node isolates it from its peers while clients still
reach it.
"""

from __future__ import annotations

from pathlib import Path

from ledgermq.chaos.layout import (
    CLUSTER,
    CQ_SEGMENT,
    HOST,
    PROXY_HOST,
    SEGMENT,
    START_TIMEOUT_S,
    Link,
    Node,
    ProcessLayout,
    Stability,
    _poll,
    node_env,
    tcp_open,
)
from ledgermq.chaos.process import ChildProcess
from ledgermq.chaos.tls import ChaosTls
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port

GROUP = "chaos-dl"
NODES = ("n0", "n1", "n2")
HEARTBEAT_MS = 100
ELECTION_TIMEOUT_MS = 800


def link_name(src: str, dst: str) -> str:
    return f"raft:{src}->{dst}"


class DLedgerLayout(ProcessLayout):
    """``DLedgerLayout(root)``; ``await start()``; ... ; ``close()``."""

    name = "dledger"
    roles_move = True

    def __init__(
        self, root: Path, *, extra_props: dict[str, object] | None = None, tls: ChaosTls | None = None
    ) -> None:
        super().__init__(root, tls)
        self.raft_ports = {n: free_port() for n in NODES}
        # One proxy per directed link i->j: node i reaches j at (PROXY_HOST, port).
        self._links = [
            Link(link_name(i, j), (PROXY_HOST, free_port()), (HOST, self.raft_ports[j]))
            for i in NODES
            for j in NODES
            if i != j
        ]
        self.nodes = {n: self._node(n, extra_props or {}) for n in NODES}
        self._last_master: str | None = None

    # -- configuration ----------------------------------------------------------------
    def peers_of(self, name: str) -> str:
        """The ``dLegerPeers`` node ``name`` is given: itself real, the others via proxies."""
        parts = []
        by_name = {link.name: link for link in self._links}
        for n in NODES:
            if n == name:
                parts.append(f"{n}-{HOST}:{self.raft_ports[n]}")
            else:
                host, port = by_name[link_name(name, n)].listen
                parts.append(f"{n}-{host}:{port}")
        return ";".join(parts)

    def _node(self, name: str, extra: dict[str, object]) -> Node:
        port = free_port(span=2)
        home = self.root / name
        store = home / "store"
        store.mkdir(parents=True, exist_ok=True)
        props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerIP1": HOST,
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": SEGMENT,
            "mappedFileSizeConsumeQueue": CQ_SEGMENT,
            "registerNameServerPeriod": 1000,
            "slaveSyncInterval": 1000,
            "flushConsumerOffsetInterval": 1000,
            "autoCreateTopicEnable": "true",
            "enableDLegerCommitLog": "true",
            "dLegerGroup": GROUP,
            "dLegerPeers": self.peers_of(name),
            "dLegerSelfId": name,
            "dLegerHeartBeatIntervalMs": HEARTBEAT_MS,
            "dLegerElectionTimeoutMs": ELECTION_TIMEOUT_MS,
            **self.server_props(),
            **extra,
        }
        conf = home / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        proc = ChildProcess(name, ["broker", "-c", str(conf)], self.root / "logs" / f"{name}.log", node_env(home))
        node = Node(name, int(name[1:]) + 1, "DLEDGER", port, store, home / "disk-full.flag", proc)
        node.clear_flags()
        return node

    # -- the protocol -----------------------------------------------------------------
    async def current_master(self) -> str | None:
        """The running node the name server lists as brokerId 0 of the group, else None."""
        try:
            async with self.admin() as admin:
                route = await admin.route("TBW102")
        except Exception:
            return None
        for data in route.broker_datas:
            if data.broker_name != GROUP:
                continue
            addr = data.broker_addrs.get(0)
            name = self.running_node_at(addr)
            if name is not None:
                self._last_master = name
                return name
        return None

    def links(self) -> list[Link]:
        return list(self._links)

    async def start(self) -> None:
        await self._start_namesrv()
        for node in self.nodes.values():
            node.process.start()
        for node in self.nodes.values():
            await self._wait_serving(node)
        if await self.wait_master(START_TIMEOUT_S) is None:
            raise RuntimeError(f"no leader registered as master within {START_TIMEOUT_S:.0f}s{self.explain()}")

    async def _await_up(self, node: Node) -> None:
        await self._wait_serving(node)
        await self._wait_registered(node)

    async def wait_stable(self, timeout: float) -> Stability:
        """Until one running leader is registered and every member's commit log ends where
        the leader's does (bounded)."""
        offsets: dict[str, int] = {}
        why = ""

        async def check() -> bool:
            nonlocal why
            for node in self.nodes.values():
                if not node.process.alive or node.process.paused:
                    why = f"{node.name} is not running"
                    return False
            leader = await self.current_master()
            if leader is None:
                why = "no leader registered as master"
                return False
            for node in self.nodes.values():
                offsets[node.name] = await self.max_offset(node.name)
            target = offsets[leader]
            why = f"leader {leader}; commit-log max offsets {offsets}"
            return target >= 0 and all(o == target for o in offsets.values())

        ok = await _poll(check, timeout, 0.2)
        return Stability(ok, why, dict(offsets))

    # -- helpers ----------------------------------------------------------------------
    async def _wait_serving(self, node: Node) -> None:
        await self._wait_port(node)
        if not await _poll(lambda: tcp_open(HOST, self.raft_ports[node.name]), START_TIMEOUT_S, 0.05):
            raise RuntimeError(f"{node.name} did not open its Raft port{self.explain()}")

    def _listed(self, node: Node, route: TopicRouteData) -> bool:
        """Listed under any brokerId (the master while it leads, n<k> -> k + 1 otherwise)."""
        return any(node.addr in d.broker_addrs.values() for d in route.broker_datas if d.broker_name == GROUP)
