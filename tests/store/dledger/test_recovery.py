"""Recovery from damaged files: torn tails, lost or stale index units, holes, lost commits."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from ledgermq.store.dledger import (
    BODY_OFFSET,
    CommittedEntryLostError,
    DLedgerRecoveryError,
    DLedgerStore,
    DLedgerStoreConfig,
)
from ledgermq.store.mapped_file import segment_name
from tests.store.dledger.helpers import append_numbered, assert_numbered, body_for, small_config


def _written(
    tmp_path: Path, count: int, *, commit: bool = False, **overrides: object
) -> tuple[DLedgerStoreConfig, list[int]]:
    cfg = small_config(tmp_path, **overrides)
    with DLedgerStore.open(cfg) as s:
        positions = append_numbered(s, count)
        if commit:
            s.save_committed_index(s.flush())
    return cfg, positions


def _zero_from(cfg: DLedgerStoreConfig, pos: int, length: int | None = None) -> None:
    """Zero data bytes from ``pos`` (to every file's end, or ``length`` bytes): lost pages."""
    size = cfg.data_file_size
    for path in sorted(cfg.data_dir.iterdir()):
        start = int(path.name)
        lo, hi = max(pos, start), start + size if length is None else min(start + size, pos + length)
        if lo < hi:
            with path.open("r+b") as f:
                f.seek(lo - start)
                f.write(bytes(hi - lo))


def _poke(cfg: DLedgerStoreConfig, pos: int, data: bytes) -> None:
    path = cfg.data_dir / segment_name(pos - pos % cfg.data_file_size)
    with path.open("r+b") as f:
        f.seek(pos % cfg.data_file_size)
        f.write(data)


def _snapshot(cfg: DLedgerStoreConfig) -> dict[str, bytes]:
    return {str(p.relative_to(cfg.default_path)): p.read_bytes() for p in cfg.default_path.rglob("*") if p.is_file()}


def test_clean_reopen(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 50)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None
        r = s.recovery
        assert (r.stop_reason, r.dirty_tail, r.index_rebuilt_from) == ("end of data", False, None)
        assert s.persisted_index == 49
        assert_numbered(s, 49)


@pytest.mark.parametrize("where", ["body", "head", "middle-of-head"])
def test_a_zeroed_tail_is_cut_and_the_log_goes_on(tmp_path: Path, where: str) -> None:
    cfg, positions = _written(tmp_path, 30)
    last = positions[29]
    cut = {"body": last + BODY_OFFSET + 3, "head": last, "middle-of-head": last + 30}[where]
    _zero_from(cfg, cut)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None
        assert s.recovery.valid_end == last
        assert s.recovery.dirty_tail == (where != "head")
        assert_numbered(s, 28)
        assert s.append([(29, 1, body_for(29))]) == [last]
    with DLedgerStore.open(cfg) as s:
        assert_numbered(s, 29)


def test_a_torn_entry_in_an_earlier_file_drops_the_files_after_it(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 60)
    victim = 20
    _zero_from(cfg, positions[victim] + BODY_OFFSET, 2)  # two body bytes lost, not the tail
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None
        assert "CRC" in s.recovery.stop_reason and s.recovery.data_files_dropped >= 1
        assert_numbered(s, victim - 1)
        assert max(mf.start_offset for mf in s.data.files) <= positions[victim]


def test_a_crash_after_creating_the_next_file_loses_nothing(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 25)
    nxt = (positions[-1] // cfg.data_file_size + 1) * cfg.data_file_size
    (cfg.data_dir / segment_name(nxt)).write_bytes(bytes(cfg.data_file_size))  # empty, never written
    with DLedgerStore.open(cfg) as s:
        assert_numbered(s, 24)
        assert s.recovery is not None and s.recovery.data_files_dropped == 1


def test_a_deleted_index_is_rebuilt_from_the_data(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 70)
    shutil.rmtree(cfg.index_dir)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.index_rebuilt_from == 0
        assert_numbered(s, 69)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.index_rebuilt_from is None


def test_damaged_and_stale_index_units_are_rewritten_and_cut(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 40)
    index_file = cfg.index_dir / segment_name(32 * 32)  # units 32..47
    raw = bytearray(index_file.read_bytes())
    raw[3 * 32 : 4 * 32] = bytes(32)  # unit 35 lost
    raw[10 * 32 : 11 * 32] = struct.pack(">iqiqq", 1, 99999, 60, 42, 1)  # a stale unit past the end
    index_file.write_bytes(bytes(raw))
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.index_rebuilt_from == 35
        assert_numbered(s, 39)
        assert s.index.max_offset() == 40 * 32
    assert index_file.read_bytes()[10 * 32 : 11 * 32] == bytes(32)


def test_index_continuity_and_terms_are_checked(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 12, recover_last_files=0)
    _poke(cfg, positions[8] + 8, struct.pack(">q", 99))  # entry 8 claims index 99
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and "follows index 7" in s.recovery.stop_reason
        assert s.last_index == 7
        new = s.append([(8, 5, b"x"), (9, 6, b"y")])
    _poke(cfg, new[1] + 16, struct.pack(">q", 4))  # entry 9's term goes back below 5
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and "below the previous term" in s.recovery.stop_reason
        assert (s.last_index, s.last_term) == (8, 5)


def test_recovery_validates_only_the_last_files_like_dledger(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 120)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None
        assert s.recovery.scan_start == (len(s.data.files) - 3) * cfg.data_file_size
        assert s.recovery.entries_scanned < 120
        assert_numbered(s, 119)


def test_losing_a_committed_entry_refuses_to_start_and_changes_nothing(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 20, commit=True)
    _zero_from(cfg, positions[15] + BODY_OFFSET, 4)
    before = _snapshot(cfg)
    with pytest.raises(CommittedEntryLostError) as info:
        DLedgerStore.open(cfg)
    text = str(info.value)
    assert "committedIndex=19" in text and "end at index 14" in text
    assert str(cfg.default_path / "checkpoint") in text and str(cfg.data_dir) in text
    assert _snapshot(cfg) == before


def test_deleted_data_with_a_committed_checkpoint_refuses_to_start(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 5, commit=True)
    shutil.rmtree(cfg.data_dir)
    with pytest.raises(CommittedEntryLostError, match="end at index -1"):
        DLedgerStore.open(cfg)


def test_a_hole_in_the_data_files_refuses_to_start(tmp_path: Path) -> None:
    cfg, _ = _written(tmp_path, 60)
    (cfg.data_dir / segment_name(cfg.data_file_size)).unlink()
    with pytest.raises(DLedgerRecoveryError, match="hole"):
        DLedgerStore.open(cfg)


def test_an_uncommitted_tail_may_be_lost(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    with DLedgerStore.open(cfg) as s:
        positions = append_numbered(s, 10)
        s.save_committed_index(s.flush())
        positions += append_numbered(s, 5)
    _zero_from(cfg, positions[12])
    with DLedgerStore.open(cfg) as s:
        assert s.committed_index == 9
        assert_numbered(s, 11)
