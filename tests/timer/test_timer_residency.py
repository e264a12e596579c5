"""Pending timers hold no file pages in the broker's resident set: timer-log units are
written to the segment file (not through its mapping) and the wheel is read and written
with pread/pwrite (not mapped at all). Measured on this process's own mappings
(/proc/self/smaps), so nothing else running on the machine moves the figure."""

from __future__ import annotations

from pathlib import Path

from ledgermq.store.timer.log import UNIT, UNIT_SIZE, TimerLog
from ledgermq.store.timer.wheel import TimerWheel

UNITS = 20_000  # ~1 MiB of units: 254 pages if they were written through the mapping
SLOTS_TOTAL = 7 * 24 * 3600


def _mapping_rss_kib(path: Path) -> int | None:
    """Rss of this process's mapping of ``path`` in KiB; None when it is not mapped."""
    found = None
    current = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            current = fields[-1] == str(path)
            continue
        if current and fields[0] == "Rss:":
            found = (found or 0) + int(fields[1])
    return found


def test_appended_units_are_not_resident_and_read_back_through_the_mapping(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", 4 << 20)
    log.load()
    try:
        positions = [
            log.append(UNIT.pack(UNIT_SIZE, i - 1, 1, 1_000 + i, 5, 4096 * i, 200, 0, i)) for i in range(UNITS)
        ]
        segment = log.files.files[0].path
        rss = _mapping_rss_kib(segment)
        assert rss is not None and rss <= 8, f"{rss} KiB of the timer log resident after {UNITS:,} appends"
        unit = log.read(positions[-1])  # the mapping sees what was written to the file
        assert unit is not None and unit.phy == 4096 * (UNITS - 1) and unit.queue_offset == UNITS - 1
        assert [u.pos for u in log.units(log.files.files[0], 0, log.files.files[0].wrote)] == positions
    finally:
        log.close()


def test_the_wheel_is_not_mapped_and_keeps_its_slots(tmp_path: Path) -> None:
    path = tmp_path / "timerwheel"
    wheel = TimerWheel(path, SLOTS_TOTAL, 1000)
    try:
        base = 1_700_000_000_000
        for i in range(0, 2 * SLOTS_TOTAL, 97):  # slots spread over the whole wheel
            wheel.put(base + i * 1000, i, i + 1, 1)
        assert _mapping_rss_kib(path) is None
        got = wheel.slot(base + 97 * 1000)
        assert got is not None and (got.first_pos, got.last_pos, got.num) == (97, 98, 1)
        assert len(wheel.live_slots(base)) == len(range(0, 2 * SLOTS_TOTAL, 97))
        wheel.clear(base + 97 * 1000)
        assert wheel.slot(base + 97 * 1000) is None
    finally:
        wheel.close()
    reopened = TimerWheel(path, SLOTS_TOTAL, 1000)
    try:
        assert reopened.existed and reopened.slot(base) is not None and reopened.slot(base + 97 * 1000) is None
    finally:
        reopened.close()
