"""A Raft member's DLedger files cut short or deleted while it was stopped: the first
sealed file and one in the middle, of the data and of the index (docs/dledger.md, "Disks
that lie"). What a data file lost is damage the member must not claim to hold (it cuts its
log there and repairs from the group); what an index file lost is rebuilt from the data.
Either way every entry the store says it holds is readable."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig
from tests.store.dledger.helpers import append_numbered, body_for, small_config

ENTRIES = 300  # about 15 data files of 4 KiB and 19 index files of 16 units


def _written(tmp_path: Path, *, retained_files: int = 0) -> DLedgerStoreConfig:
    """A committed log whose sealed data files all have a digest (so start-up trusts them
    and leaves them to the scrub), optionally after retention deleted leading files."""
    cfg = small_config(tmp_path, repair_damage=True, digests=True)
    with DLedgerStore.open(cfg) as s:
        append_numbered(s, ENTRIES)
        s.flush()
        s.save_committed_index(ENTRIES - 1)
        if retained_files:
            s.delete_leading_files(lambda mf, head: True, retained_files, 0.0)
        assert s.digests is not None
        for mf in s.data.files[:-1]:
            s.digests.write(mf.start_offset, mf.mm)
    return cfg


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.isdigit())


def _cut_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _readable(s: DLedgerStore) -> list[int]:
    """The indices in [first_index, last_index] whose entry reads back as written."""
    ok = []
    for i in range(s.first_index, s.last_index + 1):
        try:
            if s.get(i).body == body_for(i):
                ok.append(i)
        except Exception:
            pass
    return ok


FIRST: Callable[[list[Path]], Path] = lambda files: files[0]  # noqa: E731
MIDDLE: Callable[[list[Path]], Path] = lambda files: files[len(files) // 2]  # noqa: E731


@pytest.mark.parametrize("retained_files", [0, 2], ids=["log-from-0", "after-retention"])
@pytest.mark.parametrize("which", [FIRST, MIDDLE], ids=["first", "middle"])
def test_a_sealed_data_file_cut_short_is_damage_cut_and_repaired_not_trusted(
    tmp_path: Path, which: Callable[[list[Path]], Path], retained_files: int
) -> None:
    cfg = _written(tmp_path, retained_files=retained_files)
    with DLedgerStore.open(cfg) as s:
        first_index = s.first_index
    victim = which(_files(cfg.data_dir))
    _cut_half(victim)
    with DLedgerStore.open(cfg) as s:
        rec = s.recovery
        assert rec is not None and rec.damage_found, "the lost bytes passed for a log that holds them"
        assert f"data file {victim.name} was cut to" in rec.stop_reason
        lost_from = int(victim.name) + victim.stat().st_size // 2
        assert rec.valid_end <= lost_from
        # The log ends before the loss, and the member repairs until it holds all it had.
        assert s.first_index == first_index and s.last_index < ENTRIES - 1
        assert s.committed_index <= s.last_index
        assert s.repair is not None and s.repair.until == ENTRIES - 1 and s.repair.first_bad == s.last_index + 1
        assert _readable(s) == list(range(s.first_index, s.last_index + 1))
        assert s.damage.corruptions_found == 1
        append_numbered(s, ENTRIES - 1 - s.last_index)  # the leader's entries land where they were
        s.flush()
        assert _readable(s) == list(range(first_index, ENTRIES))


def test_a_short_last_data_file_is_the_log_end_not_damage(tmp_path: Path) -> None:
    """The last data file's unwritten rest is zeros anyway: its entries end where they end,
    and the checkpoint's committed index judges that end as for any other."""
    cfg = small_config(tmp_path, repair_damage=True, digests=True)
    with DLedgerStore.open(cfg) as s:
        append_numbered(s, ENTRIES)
        s.flush()
        s.save_committed_index(ENTRIES - 1)
        last = s.data.files[-1]
        written = last.wrote
    os.truncate(last.path, written + 100)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and not s.recovery.damage_found and s.repair is None
        assert s.last_index == ENTRIES - 1 and not s.damage.any
        assert last.path.stat().st_size == cfg.data_file_size


@pytest.mark.parametrize("retained_files", [0, 2], ids=["log-from-0", "after-retention"])
@pytest.mark.parametrize("how", ["delete", "truncate"])
@pytest.mark.parametrize("which", [FIRST, MIDDLE], ids=["first", "middle"])
def test_an_index_file_lost_or_cut_short_is_rebuilt_from_the_data(
    tmp_path: Path, which: Callable[[list[Path]], Path], how: str, retained_files: int
) -> None:
    cfg = _written(tmp_path, retained_files=retained_files)
    with DLedgerStore.open(cfg) as s:
        first_index = s.first_index
    victim = which(_files(cfg.index_dir))
    if how == "delete":
        victim.unlink()
    else:
        _cut_half(victim)
    with DLedgerStore.open(cfg) as s:
        rec = s.recovery
        assert rec is not None and not rec.damage_found and s.repair is None
        assert (s.first_index, s.last_index, s.committed_index) == (first_index, ENTRIES - 1, ENTRIES - 1)
        assert rec.index_rebuilt_from is not None
        assert _readable(s) == list(range(first_index, ENTRIES)), "entries held but unreadable"
    with DLedgerStore.open(cfg) as s:  # and the rebuilt index stays sound
        assert s.recovery is not None and s.recovery.index_rebuilt_from is None
        assert _readable(s) == list(range(first_index, ENTRIES))
