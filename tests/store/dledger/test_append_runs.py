"""Several entries appended at once go in a run per data file and index file
(``DLedgerStore._append_runs``): the files must hold, byte for byte, what appending the same
entries one by one writes, across data files closed with a blank, index files filled to the
end, bodies patched with their place, and single and page-sized runs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.store.dledger import BODY_OFFSET, DLedgerStore
from ledgermq.store.dledger.ledger_store import TORN_ENTRY_POINT
from tests.store.dledger.helpers import small_config

DATA_FILE = 16384  # rolls every few batches; a run of a page or more is written with pwritev


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _batches(seed: int) -> list[list[tuple[int, int, bytearray]]]:
    """Random batches (1 to 40 entries, bodies 0 to 5,000 bytes, terms rising now and then),
    after one that leaves the first data file 4 bytes short of room for a closing blank, so
    its last entry must start the next file."""
    rng = random.Random(seed)
    tight = [
        (0, 1, bytearray(b"a" * (8000 - BODY_OFFSET))),
        (1, 1, bytearray(b"b" * (DATA_FILE - 8000 - 4 - BODY_OFFSET))),
    ]
    out, index, term = [tight], 2, 1
    for _ in range(30):
        batch = []
        for _ in range(rng.choice((1, 2, 7, 40))):
            if rng.random() < 0.05:
                term += 1
            size = rng.choice((0, 1, 60, 300, 1024, 5000))
            batch.append((index, term, bytearray(rng.randbytes(size))))
            index += 1
        out.append(batch)
    return out


def _place(body: bytearray, body_pos: int) -> None:
    if len(body) >= 8:
        body[:8] = body_pos.to_bytes(8, "big")


def _write(root: Path, seed: int, one_by_one: bool, patched: bool) -> tuple[list[int], dict[str, bytes]]:
    positions: list[int] = []
    if one_by_one:
        failpoints.arm(TORN_ENTRY_POINT, lambda: None)  # armed: the entry-by-entry path
    try:
        with DLedgerStore.open(small_config(root, data_file_size=DATA_FILE)) as store:
            for batch in _batches(seed):
                if patched:
                    positions += store.append_with_pos(batch, _place)
                else:
                    positions += store.append(batch)
                assert store.last_index == batch[-1][0]
            sizes = [BODY_OFFSET + len(body) for batch in _batches(seed) for _i, _t, body in batch]
            assert [store.entry_span(i) for i in range(len(positions))] == list(zip(positions, sizes, strict=True))
    finally:
        failpoints.disarm(TORN_ENTRY_POINT)
    return positions, _files(root)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("patched", [False, True], ids=["plain", "patched"])
def test_runs_write_exactly_what_entry_by_entry_appends_write(tmp_path: Path, seed: int, patched: bool) -> None:
    pos_runs, files_runs = _write(tmp_path / "runs", seed, one_by_one=False, patched=patched)
    pos_each, files_each = _write(tmp_path / "each", seed, one_by_one=True, patched=patched)
    assert pos_runs == pos_each
    assert pos_runs[1] == DATA_FILE  # the tight entry went to the second file
    assert files_runs.keys() == files_each.keys()
    assert len([k for k in files_runs if k.startswith("dledger-n0/data/")]) > 3  # rolled several times
    assert len([k for k in files_runs if k.startswith("dledger-n0/index/")]) > 1
    for name, data in files_runs.items():
        assert data == files_each[name], name


def test_entries_read_back_from_runs_across_reopen(tmp_path: Path) -> None:
    batches = _batches(9)
    with DLedgerStore.open(small_config(tmp_path, data_file_size=DATA_FILE)) as store:
        for batch in batches:
            store.append_with_pos(batch, _place)
        store.flush()
    with DLedgerStore.open(small_config(tmp_path, data_file_size=DATA_FILE)) as store:
        entries = [e for batch in batches for e in batch]
        assert store.last_index == entries[-1][0]
        for index, term, body in entries:
            got = store.get(index)
            assert (got.term, got.body, got.pos) == (term, bytes(body), store.entry_span(index)[0])
            if len(body) >= 8:
                assert int.from_bytes(got.body[:8], "big") == got.pos + BODY_OFFSET
