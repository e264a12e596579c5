"""The DLedger layout's wiring and schedule, without processes: each node names its peers
through the proxy of its own link, the roles are the Raft ones, tail-loss is skipped."""

from __future__ import annotations

from pathlib import Path

from ledgermq.chaos.dledger import NODES, DLedgerLayout, link_name
from ledgermq.chaos.faults import CONTROLLER_KINDS, KINDS, applicable, schedule, targets_for
from ledgermq.chaos.injector import Injector
from ledgermq.chaos.layout import HOST, PROXY_HOST
from ledgermq.chaos.proxy import FaultProxy
from ledgermq.raftio.transport import parse_peers


def test_each_node_reaches_every_peer_through_its_own_link_proxy(tmp_path: Path) -> None:
    layout = DLedgerLayout(tmp_path)
    links = {link.name: link for link in layout.links()}
    assert len(links) == 6  # one per directed pair
    for me in NODES:
        peers = parse_peers(layout.peers_of(me))
        assert set(peers) == set(NODES)
        assert peers[me] == f"{HOST}:{layout.raft_ports[me]}"  # where its own Raft server listens
        for other in NODES:
            if other == me:
                continue
            link = links[link_name(me, other)]
            assert peers[other] == f"{PROXY_HOST}:{link.listen[1]}"
            assert link.target == (HOST, layout.raft_ports[other])
        conf = (tmp_path / me / "broker.properties").read_text()
        assert f"dLegerPeers={layout.peers_of(me)}\n" in conf and f"dLegerSelfId={me}\n" in conf
    listens = [link.listen for link in links.values()]
    assert len(set(listens)) == len(listens)


def test_isolating_a_node_cuts_exactly_its_four_links(tmp_path: Path) -> None:
    layout = DLedgerLayout(tmp_path)
    proxies = {link.name: FaultProxy(link.listen, link.target, link.name) for link in layout.links()}
    cut = {p.name for p in Injector(layout, proxies)._links_of("n1")}
    assert cut == {"raft:n1->n0", "raft:n1->n2", "raft:n0->n1", "raft:n2->n1"}


def test_dledger_schedule_uses_the_raft_roles_and_skips_tail_loss() -> None:
    kinds, why = applicable("dledger", KINDS)
    assert "tail-loss" not in kinds and "quorum" in why[0]
    assert not set(CONTROLLER_KINDS) & set(kinds) and len(why) == 1 + len(CONTROLLER_KINDS)
    sync_kinds, sync_why = applicable("sync", KINDS)
    assert sync_kinds == tuple(k for k in KINDS if k not in CONTROLLER_KINDS) and len(sync_why) == 2
    plans = schedule(1, 200, kinds, targets=targets_for("dledger"))
    assert {p.role for p in plans if p.kind in ("kill", "suspend", "disk-full")} == {"leader", "follower"}
    assert {p.role for p in plans if p.kind == "partition"} == {"leader"}
    assert {p.kind for p in plans} == set(kinds)
    assert schedule(1, 50, kinds, targets=targets_for("dledger")) == plans[:50]
    # the master-slave schedules are unchanged by the new parameter
    assert schedule(1, 50, sync_kinds) == schedule(1, 50, sync_kinds, targets=targets_for("sync"))
