"""Free loopback ports for tests, benches and examples that start servers.

Asking the kernel for port 0 and closing the socket hands out a port from the *ephemeral*
range, the same range the kernel draws outgoing connections' source ports from. Between
the moment we learn the port and the moment a child process binds it, any client socket
on the machine may take it, and a broker's HA port (listenPort + 1) was never checked at
all. Both made start-ups fail now and then (CI saw a bench broker exit at start-up).

So ports here come from below the ephemeral range, are checked free for the whole span a
server needs, and are never handed out twice by one process. Concurrent processes start
their search at different pid-derived points of the range, so they rarely meet, and the
bind check catches it when they do.
"""

from __future__ import annotations

import os
import random
import socket
import threading

HOST = "127.0.0.1"
_LOW, _HIGH = 15000, 32000  # below Linux's default ephemeral range (32768-60999)

_lock = threading.Lock()
_handed_out: set[int] = set()
_rng = random.Random(os.getpid())


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _usable(port: int) -> bool:
    """Bindable right now, without SO_REUSEADDR so a port in TIME_WAIT counts as taken."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, port))
        return True
    except OSError:
        return False


def _candidates() -> range:
    eph_low, eph_high = _ephemeral_range()
    if eph_low > _LOW + 2000:
        return range(_LOW, min(_HIGH, eph_low))
    return range(max(_LOW, eph_high + 1), 65000)  # unusual ephemeral range: go above it


def free_port(span: int = 1) -> int:
    """A port p with p .. p + span - 1 free on 127.0.0.1 and not handed out before by this
    process (span=2 for a broker, whose HA port is listenPort + 1)."""
    if span < 1:
        raise ValueError("span must be at least 1")
    candidates = _candidates()
    with _lock:
        start = _rng.randrange(len(candidates))
        for step in range(len(candidates)):
            port = candidates[(start + step) % len(candidates)]
            block = range(port, port + span)
            if block[-1] >= candidates.stop or any(p in _handed_out for p in block):
                continue
            if all(_usable(p) for p in block):
                _handed_out.update(block)
                return port
    raise RuntimeError(f"no {span} free consecutive ports on {HOST}")


def closed_port() -> int:
    """A port nothing listens on (free when asked, and never handed to a server by us)."""
    return free_port()
