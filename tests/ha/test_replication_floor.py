"""The HA service's replication floor and ``holds``, kept per ack instead of per send.

``HAService`` recomputes both when an ack is accepted, a link closes or leaves, or the
required set changes; a send asks them with an attribute read and two comparisons. These
tests hold the cached answers against the rule written out link by link (``_spec_floor``,
``_spec_holds``: the walk the service made per send before), over seeded random sequences
of connects, acks, closes, departures and SyncStateSet changes, and check the cases the
guarantees rest on by name.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ledgermq.ha.master import HAService
from ledgermq.ha.master_link import SlaveLink
from ledgermq.store.native_store import NativeMessageStore

FAR = 1 << 62


def _service(tmp_path: Path) -> HAService:
    store = cast(NativeMessageStore, SimpleNamespace(root=str(tmp_path)))
    return HAService(store, "127.0.0.1", 0, sync_master=True)


def _link(broker_id: int | None, held_from: int = 0) -> Any:
    return SimpleNamespace(
        broker_id=broker_id, held_from=held_from, closed_reason="", session=SimpleNamespace(ack_offset=None)
    )


def _ack(svc: HAService, link: Any, offset: int) -> None:
    link.session.ack_offset = offset
    svc.slave_acked(cast(SlaveLink, link), offset)


def _close(svc: HAService, link: Any) -> None:
    link.closed_reason = "closed by the test"
    svc.link_closed(cast(SlaveLink, link))


def _spec_floor(svc: HAService) -> int:
    required = svc.required_ids
    if required is None:
        return svc.max_acked_offset
    floor: int | None = None
    for broker_id in required:
        acks = [
            link.session.ack_offset
            for link in svc.links.values()
            if link.broker_id == broker_id and not link.closed_reason and link.session.ack_offset is not None
        ]
        if not acks:
            return -1
        floor = max(acks) if floor is None else min(floor, max(acks))
    return FAR if floor is None else floor


def _spec_holds(svc: HAService, end: int) -> bool:
    def held(link: Any) -> bool:
        ack = link.session.ack_offset
        return ack is not None and link.held_from < end <= ack

    required = svc.required_ids
    if required is None:
        return any(held(link) for link in svc.links.values())
    return all(
        any(held(link) for link in svc.links.values() if link.broker_id == b and not link.closed_reason)
        for b in required
    )


def _agrees(svc: HAService, ends: range) -> None:
    assert svc.replication_floor() == _spec_floor(svc)
    for end in ends:
        assert svc.holds(end) == _spec_holds(svc, end), end


def test_sync_master_counts_any_connected_slave_from_where_its_log_starts(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    assert svc.replication_floor() == 0 and not svc.holds(1)
    late = svc.links["b"] = _link(None, held_from=500)  # started from our last segment at 500
    _ack(svc, late, 800)
    assert svc.replication_floor() == 800
    assert svc.holds(800) and svc.holds(501)
    assert not svc.holds(500)  # a message ending at 500 was never on it
    early = svc.links["a"] = _link(None)
    _ack(svc, early, 600)
    assert svc.holds(500) and svc.holds(600) and svc.holds(700)  # 700: the late slave holds it
    svc.links.pop("b")
    _close(svc, late)
    assert svc.replication_floor() == 800  # the highest ack any slave gave, as RocketMQ's push2SlaveMaxOffset
    assert svc.holds(600) and not svc.holds(700)  # ... but only a connected slave verifiably holds a message


def test_all_ack_needs_every_member_and_counts_only_live_links(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    one = svc.links["1"] = _link(1)
    two = svc.links["2"] = _link(2)
    svc.require_acks_from(frozenset({1, 2}))
    assert svc.replication_floor() == -1 and not svc.holds(1)
    _ack(svc, one, 1000)
    assert svc.replication_floor() == -1  # member 2 acknowledged nothing yet
    _ack(svc, two, 700)
    assert svc.replication_floor() == 700 and svc.holds(700) and not svc.holds(701)
    _close(svc, two)  # its connection is closing: it no longer counts, though still listed
    assert svc.replication_floor() == -1 and not svc.holds(700)
    svc.require_acks_from(frozenset({1}))  # the SyncStateSet shrank to the member left
    assert svc.replication_floor() == 1000 and svc.holds(1000)
    svc.require_acks_from(frozenset())  # the master alone: everything counts at once
    assert svc.replication_floor() == FAR and svc.holds(1)
    svc.require_acks_from(None)  # back to 4.x SYNC_MASTER: any slave
    assert svc.replication_floor() == svc.max_acked_offset == 1000 and svc.holds(1000)


def test_a_member_with_two_links_counts_its_best_and_each_link_from_its_own_start(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    old = svc.links["old"] = _link(1)
    new = svc.links["new"] = _link(1, held_from=400)
    svc.require_acks_from(frozenset({1}))
    _ack(svc, old, 300)
    _ack(svc, new, 900)
    assert svc.replication_floor() == 900
    assert svc.holds(900) and svc.holds(401) and svc.holds(300)  # 300: held by the old link
    assert not svc.holds(350)  # above the old link's ack, at or below the new link's start


@pytest.mark.parametrize("seed", range(8))
def test_cached_answers_equal_the_link_by_link_rule(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    svc = _service(tmp_path)
    ends = range(0, 1300, 37)
    names = 0
    for _ in range(400):
        op = rng.random()
        live = list(svc.links.items())
        if op < 0.15 or not live:
            names += 1
            svc.links[f"s{names}"] = _link(rng.choice([None, 1, 2, 3]), held_from=rng.choice([0, 0, 200, 600]))
        elif op < 0.6:
            _name, link = rng.choice(live)
            _ack(svc, link, rng.randrange(0, 1200))
        elif op < 0.7:
            _close(svc, rng.choice(live)[1])
        elif op < 0.8:
            name, link = rng.choice(live)
            svc.links.pop(name)
            svc.link_closed(cast(SlaveLink, link))
        else:
            choice = rng.random()
            if choice < 0.2:
                svc.require_acks_from(None)
            else:
                svc.require_acks_from(frozenset(b for b in (1, 2, 3) if rng.random() < 0.5))
        _agrees(svc, ends)


def test_a_closing_link_stops_counting_at_once(tmp_path: Path) -> None:
    store = cast(
        NativeMessageStore,
        SimpleNamespace(root=str(tmp_path), config=SimpleNamespace(mapped_file_size_commitlog=1 << 20)),
    )
    svc = HAService(store, "127.0.0.1", 0, sync_master=True)
    ours, theirs = socket.socketpair()
    try:
        link = SlaveLink(svc, ours, "slave-1")
        link.broker_id = 1
        svc.links[link.address] = link
        svc.require_acks_from(frozenset({1}))
        link.session.ack_offset = 700
        svc.slave_acked(link, 700)
        assert svc.replication_floor() == 700 and svc.holds(700)
        link.stop("the test closes it")  # still listed until its handler returns
        assert link.address in svc.links
        assert svc.replication_floor() == -1 and not svc.holds(700)
    finally:
        ours.close()
        theirs.close()
