"""Re-seeding a DLedger member's store from a copy of another's (store/dledger/reseed.py,
``ledgermq store reseed``): what is copied, what stays the target's own, what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgermq.cli.main import cli
from ledgermq.errors import StoreLockedError
from ledgermq.store.dledger import TermState
from ledgermq.store.dledger.metadata import load_term_state, save_term_state
from ledgermq.store.dledger.reseed import reseed_store
from tests.store.dledger.mode_helpers import Driver, bodies_in_queue, open_store


def make_member(root: Path, self_id: str, bodies: list[bytes], term: TermState) -> None:
    store = open_store(root, dleger_self_id=self_id)
    try:
        d = Driver(store, term=max(term.current_term, 1))
        d.propose(bodies)
        d.commit()
        d.checkpoint()
        store.commitlog.ledger.save_term_state(term)  # type: ignore[union-attr]
    finally:
        store.shutdown()


def test_the_copy_opens_as_the_target_with_the_sources_entries_and_its_own_vote(tmp_path: Path) -> None:
    src, dst = tmp_path / "n0", tmp_path / "n2"
    make_member(src, "n0", [b"a", b"b", b"c"], TermState(3, "n0"))
    make_member(dst, "n2", [b"a"], TermState(3, "n1"))  # same term: n2 voted for n1 in it

    aside = reseed_store(src, "n0", dst, "n2")
    assert aside == tmp_path / "n2.before-reseed-1" and (aside / "dledger-n2").is_dir()
    assert not (dst / "dledger-n0").exists()
    assert load_term_state(dst / "dledger-n2") == TermState(3, "n1")  # never a second vote in term 3
    store = open_store(dst, dleger_self_id="n2")
    try:
        assert bodies_in_queue(store) == [b"a", b"b", b"c"]
        assert store.commitlog.ledger.committed_index == 2  # type: ignore[union-attr]
    finally:
        store.shutdown()


def test_a_higher_term_in_the_copy_comes_without_a_vote(tmp_path: Path) -> None:
    src, dst = tmp_path / "n0", tmp_path / "n2"
    make_member(src, "n0", [b"a"], TermState(7, "n0"))
    make_member(dst, "n2", [b"a"], TermState(2, "n1"))
    reseed_store(src, "n0", dst, "n2")
    assert load_term_state(dst / "dledger-n2") == TermState(7, None)


def test_a_running_target_is_refused_and_left_alone(tmp_path: Path) -> None:
    src, dst = tmp_path / "n0", tmp_path / "n2"
    make_member(src, "n0", [b"a"], TermState(1, "n0"))
    running = open_store(dst, dleger_self_id="n2")
    try:
        with pytest.raises(StoreLockedError):
            reseed_store(src, "n0", dst, "n2")
        assert not (tmp_path / "n2.before-reseed-1").exists()
    finally:
        running.shutdown()


def test_the_cli_command(tmp_path: Path) -> None:
    src, dst = tmp_path / "n0", tmp_path / "n2"
    make_member(src, "n0", [b"a", b"b"], TermState(1, "n0"))
    save_term_state(dst / "dledger-n2", TermState(1, None))
    args = ["store", "reseed", str(src), str(dst), "--source-id", "n0", "--target-id", "n2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "is now a copy of" in result.output and "before-reseed-1" in result.output
    bad = CliRunner().invoke(cli, ["store", "reseed", str(dst), str(src), "--source-id", "n9", "--target-id", "n0"])
    assert bad.exit_code != 0 and "not a DLedger data directory" in bad.output
    same = CliRunner().invoke(cli, ["store", "reseed", str(src), str(src), "--source-id", "n0", "--target-id", "n0"])
    assert same.exit_code != 0 and "separate directories" in same.output
    assert (src / "dledger-n0" / "data").is_dir()
