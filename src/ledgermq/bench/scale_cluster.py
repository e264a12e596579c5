"""The processes of ``ledgermq bench scale``: a name server, a recording proxy, one broker.

The broker registers through ``register_proxy`` (its ``namesrvAddr`` is the proxy), so
every REGISTER_BROKER it sends is measured on the wire; the bench's own clients talk to
the name server directly. The broker can be stopped cleanly (SIGTERM), killed (SIGKILL)
and started again on the same store and port, for the restart figures, and can run under
a lower open-file limit than the bench's (``nofile``) to show descriptor exhaustion at a
size that is quick to reach. Every process is tracked by its pid and stopped on exit,
whatever ended the run (an error, Ctrl-C).
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledgermq.bench.broker_bench import _spawn, _wait_port, spawn_namesrv, stop_processes
from ledgermq.testing.ports import free_port
from ledgermq.util.proc import die_with_parent

BROKER_NAME = "scale-broker"
CLEAN_STOP_TIMEOUT_S = 60.0  # a SIGTERM'd broker gets this long before it is killed


@dataclass(frozen=True, slots=True)
class Registration:
    """One REGISTER_BROKER the proxy saw (see ``register_proxy.registration_record``)."""

    t: float
    body: int
    topics: int


def _child_setup(nofile: int | None) -> Callable[[], None]:
    """``preexec_fn``: die with the bench, and optionally a lower open-file limit. Soft and
    hard both: the broker raises its soft limit to the hard one at start, so a lower soft
    limit alone would constrain nothing."""

    def setup() -> None:
        die_with_parent()
        if nofile is not None:
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            low = min(nofile, hard) if hard != resource.RLIM_INFINITY else nofile
            resource.setrlimit(resource.RLIMIT_NOFILE, (low, low))

    return setup


class ScaleCluster:
    """``with ScaleCluster(work) as c:`` name server, proxy and broker up and routed."""

    def __init__(self, work: Path, nofile: int | None = None) -> None:
        self.work = work
        self.nofile = nofile
        self.ns_port = free_port()
        self.proxy_port = free_port()
        self.broker_port = free_port(span=2)  # and its HA port, listenPort + 1
        self.procs: list[subprocess.Popen[bytes]] = []
        self.broker: subprocess.Popen[bytes] | None = None
        self.record = work / "registrations.jsonl"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def broker_pid(self) -> int:
        return self.broker.pid if self.broker is not None else -1

    def __enter__(self) -> ScaleCluster:
        try:
            self.procs.append(spawn_namesrv(self.work, self.ns_port))
            proxy_args = ["ledgermq.bench.register_proxy", str(self.proxy_port), self.namesrv, str(self.record)]
            proxy = _spawn(proxy_args, self.work / "proxy.log")
            self.procs.append(proxy)
            _wait_port(self.proxy_port, proxy)
            self._write_conf()
            self.start_broker()
            _wait_port(self.broker_port, self.alive_broker())
        except BaseException:
            stop_processes(self.procs)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)

    def _write_conf(self) -> None:
        props: dict[str, object] = {
            "brokerName": BROKER_NAME,
            "brokerIP1": "127.0.0.1",
            "listenPort": self.broker_port,
            "namesrvAddr": f"127.0.0.1:{self.proxy_port}",
            "storePathRootDir": self.work / "store",
            "mappedFileSizeCommitLog": 268435456,
        }
        (self.work / "broker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start_broker(self) -> None:
        """Spawn the broker on the existing store (it is not waited for: the caller times it)."""
        args = ["ledgermq.cli.main", "broker", "-c", str(self.work / "broker.properties")]
        self.broker = _spawn(args, self.work / "broker.log", _child_setup(self.nofile))
        self.procs.append(self.broker)

    def alive_broker(self) -> subprocess.Popen[bytes]:
        if self.broker is None:
            raise RuntimeError("the broker is not running")
        return self.broker

    def stop_broker(self, *, kill: bool) -> float:
        """SIGKILL, or SIGTERM and wait (SIGKILL after CLEAN_STOP_TIMEOUT_S); seconds taken."""
        proc = self.alive_broker()
        started = time.monotonic()
        if proc.poll() is None:
            if kill:
                proc.kill()
            else:
                proc.terminate()
            try:
                proc.wait(CLEAN_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.remove(proc)
        self.broker = None
        return time.monotonic() - started

    def registrations(self) -> list[Registration]:
        """Every REGISTER_BROKER the proxy recorded so far, oldest first."""
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text(encoding="utf-8").splitlines():
            try:
                doc = json.loads(line)
                out.append(Registration(float(doc["t"]), int(doc["body"]), int(doc["topics"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line being written right now
        return out
