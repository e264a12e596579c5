"""The port allocator every server-starting test and bench uses."""

from __future__ import annotations

import socket

import pytest

from ledgermq.testing import ports
from ledgermq.testing.ports import _ephemeral_range, free_port


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


def test_a_port_held_by_a_listener_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    base = free_port(span=40)
    held: list[socket.socket] = []
    try:
        for port in range(base, base + 40, 2):  # every other port of the block is taken
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        monkeypatch.setattr(ports, "_handed_out", set())  # forget the block: only the bind check is left
        monkeypatch.setattr(ports, "_candidates", lambda: range(base, base + 40))
        got = sorted(ports.free_port() for _ in range(20))
        assert got == list(range(base + 1, base + 40, 2))
        with pytest.raises(RuntimeError, match="no 1 free"):
            ports.free_port()
        with pytest.raises(RuntimeError, match="no 2 free"):
            ports.free_port(span=2)
    finally:
        for s in held:
            s.close()
