"""The wait after a bit flip: until the flipped member holds the bytes it had before the
flip again, for a flip made during a SIGKILL too (chaos/repaired.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ledgermq.chaos import disk
from ledgermq.chaos.faults import FaultRecord
from ledgermq.chaos.layout import Layout
from ledgermq.chaos.repaired import flips_left, wait_repaired

SEG = 4096
BASE = 3 * SEG


@dataclass
class _Node:
    store_dir: Path


@dataclass
class _QuietLayout:
    """A layout whose brokers report nothing damaged (no running targets to ask): only the
    flipped file decides."""

    store_dir: Path
    name: str = "sync"
    nodes: dict[str, _Node] = field(default_factory=dict)

    def node(self, name: str) -> _Node:
        return _Node(self.store_dir)

    def targets(self) -> list[str]:
        return []

    @contextlib.asynccontextmanager
    async def admin(self) -> AsyncIterator[Any]:
        yield None


def _flipped(tmp_path: Path) -> tuple[Layout, FaultRecord, Path, bytes]:
    log_dir = tmp_path / "store" / "commitlog"
    log_dir.mkdir(parents=True)
    original = (bytes(range(1, 256)) * 17)[:SEG]  # no zero byte: the data runs to the end
    seg = log_dir / f"{BASE:020d}"
    seg.write_bytes(original[:SEG])
    flips = disk.flip_bytes(seg, [(0.25, 0x01), (0.75, 0x80)])
    rec = FaultRecord(0, "bitflip", "slave", "s", "kill", 0.0, notes={"segment": seg.name, "flips": flips})
    return cast(Layout, _QuietLayout(tmp_path / "store")), rec, seg, original[:SEG]


def test_flips_left_names_the_bytes_not_yet_restored(tmp_path: Path) -> None:
    layout, rec, seg, original = _flipped(tmp_path)
    left = flips_left(layout, rec)
    assert [x.split(":")[0] for x in left] == [str(BASE + SEG // 4), str(BASE + 3 * SEG // 4)]
    fd = os.open(seg, os.O_WRONLY)
    try:
        os.pwrite(fd, original[SEG // 4 : SEG // 4 + 1], SEG // 4)  # the first one mended
    finally:
        os.close(fd)
    assert [x.split(":")[0] for x in flips_left(layout, rec)] == [str(BASE + 3 * SEG // 4)]
    seg.write_bytes(original)
    assert flips_left(layout, rec) == []
    seg.unlink()  # retention deleted the file: nothing of it is left to mend
    assert flips_left(layout, rec) == []


def test_a_kill_mode_flip_is_waited_for_until_its_bytes_are_back(tmp_path: Path) -> None:
    layout, rec, seg, original = _flipped(tmp_path)

    async def run() -> None:
        waiting = asyncio.create_task(wait_repaired(layout, rec, 0, 30.0))
        await asyncio.sleep(0.6)  # a few polls: the flip is still there
        assert not waiting.done() and rec.repaired_at == 0
        seg.write_bytes(original)  # what the repair from the replica does
        await asyncio.wait_for(waiting, 10)

    asyncio.run(run())
    assert rec.repaired_at > 0 and rec.unrepaired == ""


def test_a_kill_mode_flip_never_mended_fails_the_fault_loudly(tmp_path: Path) -> None:
    layout, rec, _seg, _original = _flipped(tmp_path)
    asyncio.run(wait_repaired(layout, rec, 0, 0.5))
    assert rec.repaired_at == 0
    assert "still holds 2 flipped byte(s)" in rec.unrepaired and str(BASE + SEG // 4) in rec.unrepaired


@dataclass
class _Gone:
    alive: bool = False
    paused: bool = False


@dataclass
class _RestartedNode:
    store_dir: Path
    process: _Gone = field(default_factory=_Gone)


@dataclass
class _RestartedLayout(_QuietLayout):
    """A target whose corruption counters read below the baseline (a new life after an
    in-process restart, or no answer): only its bytes can say the flip was found."""

    def node(self, name: str) -> _Node:
        return cast(_Node, _RestartedNode(self.store_dir))


def test_an_online_flip_mended_by_a_restarted_member_counts_as_found(tmp_path: Path) -> None:
    _layout, rec, seg, original = _flipped(tmp_path)
    rec.mode = "online"
    layout = cast(Layout, _RestartedLayout(tmp_path / "store"))

    async def run() -> None:
        waiting = asyncio.create_task(wait_repaired(layout, rec, 3, 30.0))
        await asyncio.sleep(0.6)
        assert not waiting.done()  # neither counted nor mended yet
        seg.write_bytes(original)  # the member re-copied the range after its restart
        await asyncio.wait_for(waiting, 10)

    asyncio.run(run())
    assert rec.repaired_at > 0 and rec.unrepaired == ""
