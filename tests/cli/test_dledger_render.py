"""``admin dledgerStatus``'s table and the DLedgerStatus decoding, without a network."""

from __future__ import annotations

from rich.console import Console

from ledgermq.admin.model import DLedgerStatus, decode_dledger_status
from ledgermq.cli.admin_render import dledger_group_table


def _doc(
    self_id: str, role: str, term: int, last: int, members: list[dict[str, object]] | None = None
) -> DLedgerStatus:
    return decode_dledger_status(
        {"group": "g", "selfId": self_id, "role": role, "term": term, "leader": "n0", "commitIndex": last,
         "appliedIndex": last, "lastIndex": last, "persistedIndex": last, "brokerName": "g", "brokerId": 0,
         "peers": {"n0": "127.0.0.1:1"}, "members": members or []}
    )  # fmt: skip


def _text(members: list[tuple[str, DLedgerStatus | str]]) -> dict[str, list[str]]:
    console = Console(width=400, markup=False, highlight=False)
    with console.capture() as cap:
        console.print(dledger_group_table("g", members))
    return {ln.split()[0]: ln.split() for ln in cap.get().splitlines() if ln.strip()[:1] in ("n", "?")}


def test_decode_keeps_every_field() -> None:
    st = _doc(
        "n0", "LEADER", 3, 10, [{"id": "n0", "matchIndex": 10, "lag": 0}, {"id": "n1", "matchIndex": 7, "lag": 3}]
    )
    assert st.is_leader and st.term == 3 and st.last_index == 10 and st.peers == {"n0": "127.0.0.1:1"}
    assert [(m.id, m.match_index, m.lag) for m in st.members] == [("n0", 10, 0), ("n1", 7, 3)]
    assert not decode_dledger_status({"role": "FOLLOWER"}).is_leader


def test_table_takes_lags_from_the_leader_and_shows_unreachable_members() -> None:
    leader = _doc(
        "n0", "LEADER", 3, 10, [{"id": "n0", "matchIndex": 10, "lag": 0}, {"id": "n1", "matchIndex": 7, "lag": 3}]
    )
    rows = _text([("a:2", _doc("n1", "FOLLOWER", 3, 7)), ("a:1", leader), ("a:3", "connection refused")])
    assert list(rows) == ["n0", "n1", "?"]  # by member id, the unreachable last
    assert rows["n0"][-2] == "0" and rows["n1"][-2] == "3"
    assert rows["n1"][2:6] == ["FOLLOWER", "3", "n0", "7"]
    assert "UNREACHABLE" in rows["?"] and "refused)" in rows["?"]


def test_table_without_a_leader_shows_no_lag() -> None:
    rows = _text([("a:1", _doc("n0", "CANDIDATE", 5, 4)), ("a:2", _doc("n1", "FOLLOWER", 4, 4))])
    assert rows["n0"][-2] == "-" and rows["n1"][-2] == "-"


def test_a_stuck_member_is_marked_and_the_first_index_decoded() -> None:
    leader = _doc(
        "n0",
        "LEADER",
        3,
        90,
        [{"id": "n0", "matchIndex": 90, "lag": 0}, {"id": "n2", "matchIndex": 7, "lag": 83, "stuck": True}],
    )
    assert [m.stuck for m in leader.members] == [False, True]
    assert leader.first_index == 1  # absent from an older broker's answer: nothing deleted
    assert decode_dledger_status({"role": "LEADER", "firstIndex": 42}).first_index == 42
    rows = _text([("a:1", leader), ("a:3", _doc("n2", "FOLLOWER", 3, 7))])
    assert rows["n2"][-3:-1] == ["83", "(stuck)"] and rows["n0"][-2] == "0"


def test_repairs_and_a_repair_under_way_are_shown_in_the_table() -> None:
    leader = _doc(
        "n0", "LEADER", 3, 90, [{"id": "n0", "matchIndex": 90, "lag": 0}, {"id": "n1", "matchIndex": 40, "lag": 50}]
    )
    repairing = decode_dledger_status(
        {"group": "g", "selfId": "n1", "role": "FOLLOWER", "term": 3, "leader": "n0", "commitIndex": 40,
         "appliedIndex": 40, "lastIndex": 40, "repairs": 2, "repairsCompleted": 1, "repairingUntil": 88}
    )  # fmt: skip
    assert (repairing.repairs, repairing.repairs_completed, repairing.repairing_until) == (2, 1, 88)
    rows = _text([("a:1", leader), ("a:2", repairing)])
    line = " ".join(rows["n1"])
    assert "FOLLOWER (repairing until index 88)" in line
    assert rows["n1"][-1] == "2/1" and rows["n1"][-2] == "50"
    assert rows["n0"][-1] == "0/0" and "repairing" not in " ".join(rows["n0"])
