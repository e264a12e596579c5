"""Free loopback ports for tests, benches and examples that start servers.

Asking the kernel for port 0 and closing the socket hands out a port from the *ephemeral*
range, the same range the kernel draws outgoing connections' source ports from. Between
the moment we learn the port and the moment a child process binds it, any client socket
on the machine may take it, and a broker's HA port (listenPort + 1) was never checked at
all. Both made start-ups fail now and then (CI saw a bench broker exit at start-up).

So ports here come from below the ephemeral range, and are checked free (bindable) for the
whole span a server needs. A bind check alone cannot keep two processes apart: a port
handed out stays unbound until the child that got it binds it, and two test suites run
side by side gave the same port to two brokers in that window ("address in use").

**Reservations are machine-wide.** The range is cut into blocks of ``BLOCK_SIZE`` ports,
and a process hands out ports only from blocks it reserved: it holds an exclusive
``flock`` on the block's lock file (``<system temp dir>/ledgermq-ports/block-<first
port>``) for as long as it lives. Every process using this module on the machine, of any
checkout, sees each block as taken or free; two of them never reserve the same block, so
never hand out the same port. The kernel drops a flock when its holder dies (a SIGKILL
too), so a dead process's blocks are free again at once; the lock files stay and are
reused, with nothing stale to clean up. Lock files are opened close-on-exec: the servers
a process starts do not inherit its reservations, and a forked child starts its own.

**A long suite does not run out.** A process holds at most ``MAX_BLOCKS`` blocks (512
ports): it hands out each port of them once, oldest block first, reserving the next block
when one is used up; once it holds its maximum it hands its own ports out again, the one
handed out longest ago first, and still only when the bind check passes. Within one
process a port therefore comes back only after 511 others were handed out, long after the
test that used it ended (one test takes a few dozen at most); across processes never while
its holder lives. About 33 processes can hold their maximum at once in the default range;
a process that finds every block taken reuses its own ports, and one that holds none then
fails with an error naming the lock directory.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
_LOW, _HIGH = 15000, 32000  # below Linux's default ephemeral range (32768-60999)
BLOCK_SIZE = 64
MAX_BLOCKS = 8
LOCK_DIR = Path(tempfile.gettempdir()) / "ledgermq-ports"


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


def default_range() -> range:
    """The ports handed out: below the kernel's ephemeral range (above it when that range
    is unusually low)."""
    eph_low, eph_high = _ephemeral_range()
    if eph_low > _LOW + 2000:
        return range(_LOW, min(_HIGH, eph_low))
    return range(max(_LOW, eph_high + 1), 65000)


@dataclass
class _Block:
    first: int
    size: int
    fd: int

    def ports(self) -> range:
        return range(self.first, self.first + self.size)


@dataclass
class PortReserver:
    """Hands out ports from machine-wide reserved blocks of ``candidates`` (module
    docstring). One instance per process serves ``free_port``; tests make their own over a
    small range and a private ``lock_dir``."""

    candidates: range
    lock_dir: Path
    block_size: int = BLOCK_SIZE
    max_blocks: int = MAX_BLOCKS
    _blocks: list[_Block] = field(default_factory=list)
    _handed: dict[int, int] = field(default_factory=dict)  # port -> when handed out (a counter)
    _clock: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random = field(default_factory=lambda: random.Random(os.getpid()))

    def free_port(self, span: int = 1) -> int:
        """A port p with p .. p + span - 1 reserved by this process, bindable on 127.0.0.1,
        and handed out by it before (if ever) longer ago than any other such span."""
        if not 1 <= span <= self.block_size:
            raise ValueError(f"span must be between 1 and {self.block_size}, got {span}")
        with self._lock:
            port = self._fresh(span)
            while port is None and len(self._blocks) < self.max_blocks and self._reserve_block():
                port = self._fresh(span)
            if port is None:
                port = self._oldest(span)
            if port is None and self._reserve_block():  # every own port busy: one more block
                port = self._fresh(span)
            if port is None:
                raise RuntimeError(
                    f"no {span} free consecutive ports on {HOST}: this process holds {len(self._blocks)} "
                    f"block(s) of {self.block_size} and every other block of {self.candidates.start}-"
                    f"{self.candidates.stop - 1} is reserved by a live process (lock files in {self.lock_dir})"
                )
            for p in range(port, port + span):
                self._clock += 1
                self._handed[p] = self._clock
            return port

    def release_all(self) -> None:
        """Give every block back (closing its lock file) and forget what was handed out."""
        with self._lock:
            for block in self._blocks:
                os.close(block.fd)
            self._blocks.clear()
            self._handed.clear()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's locks are the parent's (the child's copies of the
        descriptors share them, so closing them releases nothing the parent holds)."""
        for block in self._blocks:
            try:
                os.close(block.fd)
            except OSError:
                pass
        self._blocks = []
        self._handed = {}
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork
        self._rng = random.Random(os.getpid())

    # -- inside the lock -------------------------------------------------------------
    def _fresh(self, span: int) -> int | None:
        """The first span of held ports never handed out, all bindable."""
        for block in self._blocks:
            for port in range(block.first, block.first + block.size - span + 1):
                span_ports = range(port, port + span)
                if any(p in self._handed for p in span_ports):
                    continue
                if all(_usable(p) for p in span_ports):
                    return port
        return None

    def _oldest(self, span: int) -> int | None:
        """Of held spans all handed out before, the bindable one handed out longest ago."""
        spans = [
            (max(self._handed.get(p, 0) for p in range(port, port + span)), port)
            for block in self._blocks
            for port in range(block.first, block.first + block.size - span + 1)
        ]
        for _, port in sorted(spans):
            if all(_usable(p) for p in range(port, port + span)):
                return port
        return None

    def _reserve_block(self) -> bool:
        """Lock one more free block (searching from a pid-derived point, so concurrent
        processes rarely try the same lock files); False when every block is held."""
        firsts = list(range(self.candidates.start, self.candidates.stop - self.block_size + 1, self.block_size))
        if not firsts:
            return False
        held = {b.first for b in self._blocks}
        _make_shared_dir(self.lock_dir)
        start = self._rng.randrange(len(firsts))
        for step in range(len(firsts)):
            first = firsts[(start + step) % len(firsts)]
            if first in held:
                continue
            fd = self._try_lock(self.lock_dir / f"block-{first}")
            if fd is not None:
                self._blocks.append(_Block(first, self.block_size, fd))
                return True
        return False

    @staticmethod
    def _try_lock(path: Path) -> int | None:
        try:
            # Read-only is enough for flock, and lets other users open a file we created.
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return None  # a lock file we may not open: someone else's block
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd


def _make_shared_dir(path: Path) -> None:
    """The lock directory, writable by every user (sticky, as the temp dir itself), so
    everyone's processes share one set of reservations."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(path, 0o1777)
    except OSError:
        pass  # made by someone else in the meantime: theirs to set


_reserver = PortReserver(default_range(), LOCK_DIR)
os.register_at_fork(after_in_child=_reserver.forget_after_fork)


def free_port(span: int = 1) -> int:
    """A port p with p .. p + span - 1 free on 127.0.0.1 and reserved for this process
    machine-wide (span=2 for a broker, whose HA port is listenPort + 1; at most 64)."""
    return _reserver.free_port(span)


def closed_port() -> int:
    """A port nothing listens on (free when asked, and reserved for this process, so no
    other process's server takes it)."""
    return _reserver.free_port()
