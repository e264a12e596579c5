"""currterm and checkpoint: DLedger's names and text, atomic writes, strict reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.failpoints import armed
from ledgermq.store.dledger import DLedgerStore, LedgerCheckpoint, MetadataError, TermState
from ledgermq.store.dledger import metadata as md
from tests.store.dledger.helpers import small_config


def test_missing_files_mean_a_fresh_node(tmp_path: Path) -> None:
    assert md.load_term_state(tmp_path) == TermState(0, None)
    assert md.load_checkpoint(tmp_path) is None


def test_round_trips_in_dledger_text(tmp_path: Path) -> None:
    md.save_term_state(tmp_path, TermState(7, "n2"))
    assert (tmp_path / "currterm").read_text() == "currTerm=7\nvoteLeader=n2\n"
    assert md.load_term_state(tmp_path) == TermState(7, "n2")
    md.save_term_state(tmp_path, TermState(8, None))
    assert (tmp_path / "currterm").read_text() == "currTerm=8\nvoteLeader=\n"
    assert md.load_term_state(tmp_path) == TermState(8, None)
    md.save_checkpoint(tmp_path, LedgerCheckpoint(41, 40))
    assert (tmp_path / "checkpoint").read_text() == "endIndex=41\ncommittedIndex=40\n"
    assert md.load_checkpoint(tmp_path) == LedgerCheckpoint(41, 40)


def test_reads_what_java_properties_would_accept(tmp_path: Path) -> None:
    # Java's Properties is a Hashtable: any key order; comments and spacing are legal.
    (tmp_path / "currterm").write_text("#Mon Jan 01\nvoteLeader = n0\n\ncurrTerm:12\n")
    assert md.load_term_state(tmp_path) == TermState(12, "n0")
    (tmp_path / "checkpoint").write_text("committedIndex=-1\nendIndex=-1\n")
    assert md.load_checkpoint(tmp_path) == LedgerCheckpoint(-1, -1)


@pytest.mark.parametrize(
    ("name", "text", "complaint"),
    [
        ("currterm", "", "no currTerm"),
        ("currterm", "currTerm=abc\n", "not an integer"),
        ("currterm", "currTerm=-2\n", "out of range"),
        ("currterm", "currTerm=3\ngarbage\n", "not key=value"),
        ("currterm", "currTerm=\\u0033\n", "escape"),
        ("checkpoint", "endIndex=4\n", "no committedIndex"),
        ("checkpoint", "endIndex=4\ncommittedIndex=4x\n", "not an integer"),
    ],
)
def test_a_corrupt_file_stops_start_up_naming_it(tmp_path: Path, name: str, text: str, complaint: str) -> None:
    cfg = small_config(tmp_path)
    cfg.default_path.mkdir(parents=True)
    (cfg.default_path / name).write_text(text)
    with pytest.raises(MetadataError, match=complaint) as info:
        DLedgerStore.open(cfg)
    assert str(cfg.default_path / name) in str(info.value)


def test_undecodable_bytes_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "currterm").write_bytes(b"currTerm=\xff\xfe\n")
    with pytest.raises(MetadataError, match="currterm"):
        md.load_term_state(tmp_path)


def test_a_failed_write_leaves_the_previous_state(tmp_path: Path) -> None:
    md.save_term_state(tmp_path, TermState(3, "n1"))

    def boom() -> None:
        raise OSError("disk gone")

    with armed("atomic_file.before_rename", boom), pytest.raises(OSError):
        md.save_term_state(tmp_path, TermState(4, "n2"))
    assert md.load_term_state(tmp_path) == TermState(3, "n1")


def test_values_that_need_escapes_are_refused() -> None:
    with pytest.raises(ValueError):
        md.format_properties([("voteLeader", "a=b")])


def test_store_keeps_term_state(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    with DLedgerStore.open(cfg) as s:
        assert s.term_state == TermState()
        s.save_term_state(TermState(2, "n0"))
    with DLedgerStore.open(cfg) as s:
        assert s.term_state == TermState(2, "n0")
