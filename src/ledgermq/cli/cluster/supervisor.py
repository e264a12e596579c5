"""Run a local cluster's processes: start them, wait until they really serve, restart the
ones that die, and stop them in order.

*Ready* means what a client needs, not that a TCP connect succeeds (anything listening on
a taken port answers that): the name server answers a cluster-info request, and a broker
answers a request on its own port and is listed by the name server under its brokerId
(any id for a DLedger member, whose id follows its Raft role).

A process that dies after start-up is restarted with back-off (1 s doubling to 30 s, back
to 1 s once it has stayed up a minute), so killing the master shows the slave serving
reads and then the master returning, instead of the whole cluster stopping. Each process's
pid is kept in ``<data>/run/<name>.pid`` for tools and tests that want to signal one.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client.tls import TlsOptions
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import LedgerError
from ledgermq.util.proc import die_with_parent

POLL_S = 0.2
STOP_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Backoff:
    """Delays between restarts of one process."""

    first_s: float = 1.0
    max_s: float = 30.0
    stable_s: float = 60.0  # up this long: the next death waits first_s again


@dataclass(frozen=True)
class MemberSpec:
    """One process of the cluster."""

    name: str  # file-name safe: "namesrv", "broker-a", "broker-a-s", "broker-a-n0"
    label: str  # for people: "name server", "master broker-a"
    args: tuple[str, ...]  # after ``ledgermq -v``
    log: Path
    addr: str | None = None  # a broker's remoting address (None: the name server)
    broker_id: int | None = None  # the id it registers as (None: any, DLedger)
    group: str = "broker-a"


@dataclass
class Member:
    spec: MemberSpec
    proc: subprocess.Popen[bytes] | None = None
    log_offset: int = 0  # where this run's output starts in the log
    started_at: float = 0.0
    ready: bool = False
    delay_s: float = 0.0
    restart_at: float | None = None
    restarts: int = field(default=0)


class StartupFailed(Exception):
    """A process exited or did not become ready during start-up; the message says why."""


def log_cause(member: Member, max_lines: int = 5) -> str:
    """The lines of this run's log that explain an exit: the ``Error:`` line our commands
    print for a start-up failure if there is one, else the last few lines."""
    try:
        with open(member.spec.log, "rb") as f:
            f.seek(member.log_offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error:")]
    picked = errors[-1:] if errors else lines[-max_lines:]
    return "\n".join(picked)


class Supervisor:
    def __init__(
        self,
        namesrv_addr: str,
        run_dir: Path,
        echo: Callable[[str], None],
        backoff: Backoff = Backoff(),
        tls: TlsOptions | None = None,
    ) -> None:
        self.namesrv_addr = namesrv_addr
        self.tls = tls  # how to reach the cluster's servers (cluster up --tls)
        self.run_dir = run_dir
        self.echo = echo
        self.backoff = backoff
        self.members: list[Member] = []

    # -- processes ---------------------------------------------------------------------
    def spawn(self, spec: MemberSpec) -> Member:
        member = Member(spec, delay_s=self.backoff.first_s)
        self.members.append(member)
        self._start(member)
        return member

    def _start(self, member: Member) -> None:
        spec = member.spec
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(spec.log, "ab") as log:  # the child keeps its own descriptor
            member.log_offset = log.tell()
            member.proc = subprocess.Popen(
                [sys.executable, "-m", "ledgermq.cli.main", "-v", *spec.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches only us; we stop the children in order
                preexec_fn=die_with_parent,
            )
        member.started_at = SYSTEM_CLOCK.monotonic()
        member.ready = False
        member.restart_at = None
        self.pid_file(spec).write_text(f"{member.proc.pid}\n")

    def pid_file(self, spec: MemberSpec) -> Path:
        return self.run_dir / f"{spec.name}.pid"

    def stop(self) -> None:
        """Brokers first (together: each unregisters and marks its store cleanly stopped),
        then the name server."""
        brokers = [m for m in self.members if m.spec.addr is not None]
        others = [m for m in self.members if m.spec.addr is None]
        for batch in (brokers, others):
            live = [m for m in batch if m.proc is not None and m.proc.poll() is None]
            for m in live:
                assert m.proc is not None
                m.proc.send_signal(signal.SIGTERM)
            deadline = SYSTEM_CLOCK.monotonic() + STOP_TIMEOUT_S
            for m in live:
                assert m.proc is not None
                try:
                    m.proc.wait(max(0.1, deadline - SYSTEM_CLOCK.monotonic()))
                except subprocess.TimeoutExpired:
                    self.echo(f"{m.spec.label} did not stop in {STOP_TIMEOUT_S:.0f} s; killing it")
                    m.proc.kill()
                    m.proc.wait(5)
        for m in self.members:
            self.pid_file(m.spec).unlink(missing_ok=True)

    # -- readiness ---------------------------------------------------------------------
    def _ready(self, members: list[Member]) -> set[int]:
        """Indexes (into ``members``) of the ones that serve now; one name-server query."""

        async def ask() -> set[int]:
            ready: set[int] = set()
            async with AdminClient(self.namesrv_addr, timeout=2.0, connect_timeout=1.0, tls=self.tls) as admin:
                try:
                    info = await admin.cluster_info()
                except (LedgerError, OSError, TimeoutError):
                    return ready
                for i, m in enumerate(members):
                    spec = m.spec
                    if spec.addr is None:
                        ready.add(i)
                        continue
                    data = info.broker_addr_table.get(spec.group)
                    addrs = data.broker_addrs if data is not None else {}
                    if spec.broker_id is None:
                        listed = spec.addr in addrs.values()
                    else:
                        listed = addrs.get(spec.broker_id) == spec.addr
                    if listed:
                        try:  # a dead broker stays listed until it expires: ask the broker too
                            await admin.broker_runtime_info(spec.addr)
                        except (LedgerError, OSError, TimeoutError):
                            continue
                        ready.add(i)
            return ready

        try:
            return asyncio.run(ask())
        except (LedgerError, OSError, TimeoutError):
            return set()

    def wait_ready(self, members: list[Member], timeout: float, stopping: Callable[[], bool]) -> bool:
        """True once all serve; False if a signal asked to stop; StartupFailed if one exits
        (with the cause from its log) or the timeout passes."""
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        while not stopping():
            for m in members:
                assert m.proc is not None
                if m.proc.poll() is not None:
                    cause = log_cause(m) or "(its log is empty)"
                    raise StartupFailed(
                        f"{m.spec.label} exited with {m.proc.returncode} during start-up (log {m.spec.log}): {cause}"
                    )
            pending = [m for m in members if not m.ready]
            for i in self._ready(pending):
                pending[i].ready = True
            if all(m.ready for m in members):
                return True
            if SYSTEM_CLOCK.monotonic() > deadline:
                names = ", ".join(m.spec.label for m in members if not m.ready)
                raise StartupFailed(f"{names} not serving after {timeout:.0f} s; see the logs under {self.log_dir}")
            time.sleep(POLL_S)
        return False

    @property
    def log_dir(self) -> Path:
        return self.members[0].spec.log.parent if self.members else self.run_dir

    # -- supervision -------------------------------------------------------------------
    def run(self, stopping: Callable[[], bool], on_poll: Callable[[], None] | None = None) -> None:
        """Restart what dies, report what comes back, until a signal asks to stop.
        ``on_poll`` runs once per poll (e.g. reporting a controller-mode failover)."""
        while not stopping():
            if on_poll is not None:
                on_poll()
            now = SYSTEM_CLOCK.monotonic()
            for m in self.members:
                self._tend(m, now)
            pending = [m for m in self.members if not m.ready and m.restart_at is None and m.restarts]
            if pending:
                for i in self._ready(pending):
                    m = pending[i]
                    m.ready = True
                    self.echo(f"{m.spec.label} is back (pid {m.proc.pid if m.proc else '?'})")
            time.sleep(POLL_S)

    def _tend(self, m: Member, now: float) -> None:
        assert m.proc is not None
        if m.restart_at is not None:
            if now >= m.restart_at:
                m.restarts += 1
                self._start(m)
                self.echo(f"{m.spec.label} restarted (pid {m.proc.pid}); log {m.spec.log}")
            return
        if m.proc.poll() is None:
            if m.ready and now - m.started_at >= self.backoff.stable_s:
                m.delay_s = self.backoff.first_s
            return
        if now - m.started_at >= self.backoff.stable_s:
            m.delay_s = self.backoff.first_s
        cause = log_cause(m, max_lines=2) if m.proc.returncode > 0 else ""
        self.echo(
            f"{m.spec.label} exited with {m.proc.returncode}; restarting in {m.delay_s:g} s"
            + (f" ({cause.splitlines()[-1]})" if cause else "")
        )
        m.ready = False
        m.restart_at = now + m.delay_s
        m.delay_s = min(m.delay_s * 2, self.backoff.max_s)

    def master_addr(self, group: str) -> str | None:
        """The address the name server lists as ``group``'s master (brokerId 0), if any."""

        async def ask() -> str | None:
            async with AdminClient(self.namesrv_addr, timeout=2.0, connect_timeout=1.0, tls=self.tls) as admin:
                data = (await admin.cluster_info()).broker_addr_table.get(group)
                return data.master_addr() if data is not None else None

        try:
            return asyncio.run(ask())
        except (LedgerError, OSError, TimeoutError):
            return None
