"""The web console as a member of ``cluster up``: where it listens and when it is ready
(it answers HTTP on its port), so the banner names a URL that works."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from ledgermq.cli.cluster.supervisor import POLL_S, Member, StartupFailed, log_cause
from ledgermq.client.tls import TlsOptions
from ledgermq.clock import SYSTEM_CLOCK

CONSOLE_HOST = "127.0.0.1"  # no users file in a development cluster: never reachable from elsewhere


def console_args(namesrv: str, port: int, tls: TlsOptions | None) -> tuple[str, ...]:
    """``ledgermq console``'s arguments; with ``cluster up --tls`` the client certificate the
    supervisor uses too (the servers refuse anything else)."""
    args: tuple[str, ...] = ("console", "-n", namesrv, "--host", CONSOLE_HOST, "--port", str(port))
    if tls is not None:
        args += ("--tls", "--tls-trust-cert", tls.trust_cert_path)
        args += ("--tls-cert", tls.cert_path, "--tls-key", tls.key_path)
    return args


def console_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{CONSOLE_HOST}:{port}/healthz", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def wait_console(member: Member, port: int, timeout: float, stopping: Callable[[], bool]) -> None:
    """Until the console answers; StartupFailed (with its log's reason) if it exits or the
    timeout passes."""
    deadline = SYSTEM_CLOCK.monotonic() + timeout
    while not stopping():
        assert member.proc is not None
        if member.proc.poll() is not None:
            cause = log_cause(member) or "(its log is empty)"
            raise StartupFailed(f"the console exited with {member.proc.returncode} (log {member.spec.log}): {cause}")
        if console_answers(port):
            member.ready = True
            return
        if SYSTEM_CLOCK.monotonic() > deadline:
            raise StartupFailed(f"the console is not serving after {timeout:.0f} s; see {member.spec.log}")
        time.sleep(POLL_S)
