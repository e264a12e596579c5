"""The controller layout's wiring and schedule, without processes: every broker reaches its
peer's HA port and every controller node through its own proxy, isolating a broker cuts
exactly its HA and controller links, isolating the controller leader exactly its Raft
links; the controller kinds run only on this layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.chaos.controller import BROKERS, CONTROLLER_IDS, ControllerLayout
from ledgermq.chaos.faults import CONTROLLER_KINDS, KINDS, applicable, restrict, schedule, targets_for
from ledgermq.chaos.injector import Injector
from ledgermq.chaos.layout import HOST, PROXY_HOST
from ledgermq.chaos.proxy import FaultProxy
from ledgermq.chaos.runner import RunConfig


def _props(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_brokers_reach_their_peer_and_the_embedded_controller_through_their_own_proxies(tmp_path: Path) -> None:
    layout = ControllerLayout(tmp_path, controllers=1)
    links = {link.name: link for link in layout.links()}
    assert set(links) == {"ha:b1->b2", "ha:b2->b1", "ctl:b1->c0", "ctl:b2->c0"}
    for me in BROKERS:
        conf = _props(tmp_path / me / "broker.properties")
        assert conf["enableControllerMode"] == "true" and conf["allAckInSyncStateSet"] == "true"
        assert conf["minInSyncReplicas"] == "1" and "brokerId" not in conf and "brokerRole" not in conf
        assert conf["brokerIP2"] == PROXY_HOST  # a slave dials the proxy for this broker's HA port
        ctl = links[f"ctl:{me}->c0"]
        assert conf["controllerAddr"] == f"{PROXY_HOST}:{ctl.listen[1]}"
        assert ctl.target == (HOST, layout.namesrv_port)  # the controller answers on the name server's port
        ha = links[f"ha:{me}->{'b2' if me == 'b1' else 'b1'}"]
        assert ha.listen == (PROXY_HOST, ha.target[1]) and ha.target[0] == HOST
    ns = _props(tmp_path / "namesrv.properties")
    assert ns["enableControllerInNamesrv"] == "true" and ns["controllerHeartBeatTimeoutMills"] == "1500"


def test_isolating_a_broker_cuts_its_ha_and_controller_links_and_the_leader_its_raft_links(tmp_path: Path) -> None:
    layout = ControllerLayout(tmp_path, controllers=3)
    proxies = {link.name: FaultProxy(link.listen, link.target, link.name) for link in layout.links()}
    injector = Injector(layout, proxies)
    assert {p.name for p in injector._links_of("b1")} == {
        "ha:b1->b2", "ha:b2->b1", "ctl:b1->c0", "ctl:b1->c1", "ctl:b1->c2",
    }  # fmt: skip
    assert {p.name for p in injector._raft_links_of("c1")} == {
        "raft:c1->c0",
        "raft:c1->c2",
        "raft:c0->c1",
        "raft:c2->c1",
    }
    for c in CONTROLLER_IDS:
        peers = _props(tmp_path / c / "controller.properties")["controllerDLegerPeers"].split(";")
        assert f"{c}-{HOST}:{layout.raft_ports[c]}" in peers  # itself for real, the others by proxy
        assert sum(p.split("-", 1)[1].startswith(PROXY_HOST) for p in peers) == 2
    addrs = _props(tmp_path / "b2" / "broker.properties")["controllerAddr"].split(";")
    assert addrs == [f"{PROXY_HOST}:{proxies[f'ctl:b2->{c}'].listen[1]}" for c in CONTROLLER_IDS]


def test_controller_kinds_belong_to_the_controller_layout_and_bring_three_nodes() -> None:
    assert applicable("controller", KINDS) == (KINDS, [])
    plans = schedule(3, 120, KINDS, targets=targets_for("controller"))
    assert {p.role for p in plans if p.kind == "partition"} == {"master", "slave"}
    assert {p.role for p in plans if p.kind in CONTROLLER_KINDS} == {"controller-leader"}
    assert RunConfig("controller", 1, 1, ("kill",), Path("x")).controllers == 1
    assert RunConfig("controller", 1, 1, ("kill", "controller-kill"), Path("x")).controllers == 3
    targets, kinds, why = restrict(targets_for("controller"), ("kill", "tail-loss", "controller-kill"), ("slave",))
    assert kinds == ("kill",) and targets["kill"] == ("slave",) and len(why) == 2
    with pytest.raises(ValueError, match=r"choose 1 .* or 3"):
        ControllerLayout(Path("/nonexistent-never-made"), controllers=2)
