"""Looking back for the last sound entry when a file's first entry is bad."""

from __future__ import annotations

from typing import Any

import pytest

from ledgermq.store.dledger import sealed_walk
from ledgermq.store.dledger.sealed_walk import FileWalk, _last_sound_before


def test_a_sound_file_without_entries_is_stepped_over_not_looped_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """File 2's first entry is bad, file 1 is sound but holds no entry (it starts with a
    blank), file 0 ends with a sound entry: the walk finds file 0's, and ends (it spun
    forever on file 1 before)."""
    last_of_0 = object()
    walks = {0: FileWalk(last_of_0, None), 1: FileWalk(None, None)}  # type: ignore[arg-type]
    files: list[Any] = [0, 1, 2]
    calls: list[int] = []

    def fake_walk(mf: int, *_args: object) -> FileWalk:
        calls.append(mf)
        assert len(calls) < 10, "looping"
        return walks[mf]

    monkeypatch.setattr(sealed_walk, "walk_sealed_file", fake_walk)
    bad = FileWalk(None, 0, "bad magic")
    got = _last_sound_before(files, 2, bad, None, True, None)
    assert got.last is last_of_0 and got.bad_pos == 0 and got.reason == "bad magic"
    assert calls == [1, 0]
