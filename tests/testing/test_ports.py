"""The port allocator every server-starting test and bench uses."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ledgermq.testing.ports import PortReserver, _ephemeral_range, free_port

# A child that reserves ports from a small range beside the test, prints them as one JSON
# line, and keeps its reservations until its stdin closes (or it is killed).
HOLDER = """
import json, sys, time
from pathlib import Path
from ledgermq.testing.ports import PortReserver
low, high, lock_dir, block, blocks, count, go = sys.argv[1:8]
r = PortReserver(range(int(low), int(high)), Path(lock_dir), int(block), int(blocks))
deadline = time.monotonic() + 30
while not Path(go).exists() and time.monotonic() < deadline:  # start together
    time.sleep(0.001)
print(json.dumps([r.free_port() for _ in range(int(count))]), flush=True)
sys.stdin.read()
"""


def _holder(low: int, high: int, lock_dir: Path, block: int, blocks: int, n: int, go: Path) -> subprocess.Popen[str]:
    args = [str(a) for a in (low, high, lock_dir, block, blocks, n, go)]
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _read_ports(proc: subprocess.Popen[str], timeout: float = 30.0) -> list[int]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"holder {proc.pid} printed no ports within {timeout:.0f}s"
    line = proc.stdout.readline()
    assert line, f"holder {proc.pid} exited with {proc.wait(5)}"
    ports = json.loads(line)
    assert isinstance(ports, list)
    return [int(p) for p in ports]


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _quiet_range(width: int) -> range:
    """``width`` ports below the ephemeral range that are all bindable now (so the test is
    about reservations, not about whatever else the machine runs)."""
    for first in range(20000, 31000 - width, width):
        ports = range(first, first + width)
        if all(_usable(p) for p in ports):
            return ports
    pytest.skip("no quiet range of ports on this machine")


def _usable(port: int) -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False


def test_two_processes_reserving_at_once_never_get_the_same_port(tmp_path: Path) -> None:
    # Four blocks of 16, each process at most two: both want 30 ports at the same moment.
    # Without machine-wide reservations both would hand out the first free ports they
    # found, the same ones; with them each takes its own blocks.
    ports = _quiet_range(64)
    go = tmp_path / "go"
    for round_ in range(5):
        lock_dir = tmp_path / f"locks-{round_}"
        procs = [_holder(ports.start, ports.stop, lock_dir, 16, 2, 30, go) for _ in range(2)]
        try:
            go.touch()
            a, b = (_read_ports(p) for p in procs)
            assert len(a) == len(b) == 30
            assert not set(a) & set(b), f"round {round_}: both processes got {sorted(set(a) & set(b))}"
            assert all(p in ports for p in a + b)
        finally:
            _kill(procs)
            go.unlink(missing_ok=True)


def test_the_ports_of_a_dead_holder_come_back(tmp_path: Path) -> None:
    ports = _quiet_range(32)
    go = tmp_path / "go"
    go.touch()
    holder = _holder(ports.start, ports.stop, tmp_path, 16, 2, 32, go)  # takes both blocks
    mine = PortReserver(ports, tmp_path, 16, 2)
    try:
        held = _read_ports(holder)
        assert sorted(held) == list(ports)
        with pytest.raises(RuntimeError, match="reserved by a live process"):
            mine.free_port()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)  # the kernel dropped its flocks when it died: nothing to clean up
        got = [mine.free_port() for _ in range(32)]
        assert sorted(got) == sorted(held)
    finally:
        mine.release_all()
        _kill([holder])


def test_a_process_reuses_its_own_ports_oldest_first_once_at_its_maximum(tmp_path: Path) -> None:
    ports = _quiet_range(32)
    r = PortReserver(ports, tmp_path, 16, 1)
    other = PortReserver(ports, tmp_path, 16, 1)
    try:
        first = [r.free_port() for _ in range(16)]
        assert len(set(first)) == 16  # a whole block, each port once
        theirs = other.free_port()
        assert theirs not in first
        again = [r.free_port() for _ in range(16)]
        assert again == first  # oldest first, and never the other process's block
    finally:
        r.release_all()
        other.release_all()


def test_ports_are_never_handed_out_twice_and_spans_are_free() -> None:
    seen: set[int] = set()
    for _ in range(200):
        port = free_port(span=2)
        assert port not in seen and port + 1 not in seen
        seen.update((port, port + 1))
        for p in (port, port + 1):  # both bindable, as a broker and its HA port need
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))


def test_ports_avoid_the_ephemeral_range_clients_draw_source_ports_from() -> None:
    low, high = _ephemeral_range()
    for _ in range(50):
        port = free_port(span=2)
        assert not (low <= port <= high) and not (low <= port + 1 <= high)


def test_a_port_held_by_a_listener_is_skipped(tmp_path: Path) -> None:
    ports = _quiet_range(40)
    r = PortReserver(ports, tmp_path, 40, 1)
    held: list[socket.socket] = []
    try:
        for port in range(ports.start, ports.stop, 2):  # every other port of the block is taken
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        got = sorted(r.free_port() for _ in range(20))
        assert got == list(range(ports.start + 1, ports.stop, 2))
        with pytest.raises(RuntimeError, match="no 2 free"):
            r.free_port(span=2)
    finally:
        r.release_all()
        for s in held:
            s.close()


def test_a_span_wider_than_a_block_is_refused() -> None:
    with pytest.raises(ValueError, match="span must be between 1 and 64"):
        free_port(span=65)
