"""Check every port a local cluster will listen on before starting anything.

A taken port used to surface only as a child exiting during start-up (after a banner had
been printed), with the cause in a log file. Checking first lets ``cluster up`` stop with
one line naming the port, what it is for and the option that moves it.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedPort:
    port: int
    what: str  # e.g. "broker-a master HA port"
    option: str  # the cluster up option that moves it, e.g. "--broker-port"
    host: str = ""  # where it binds when not the cluster's host


class PortProblem(Exception):
    """One line for the operator: which port, why, and what to do."""


def check_ports(host: str, plan: list[PlannedPort]) -> None:
    """PortProblem for the first port that is out of range, planned twice, or cannot be bound.

    The probe sets SO_REUSEADDR as our servers do, so a port left in TIME_WAIT by the last
    run counts as free (the servers can bind it) while one with a listener does not."""
    seen: dict[int, PlannedPort] = {}
    for p in plan:
        if not 0 < p.port < 65536:
            raise PortProblem(f"port {p.port} ({p.what}) is out of range; choose another with {p.option}")
        if p.port in seen:
            other = seen[p.port]
            raise PortProblem(
                f"port {p.port} would be both the {other.what} and the {p.what}; "
                f"choose other ports with {other.option} / {p.option}"
            )
        seen[p.port] = p
    for p in plan:
        bind_host = p.host or host
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind_host, p.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    cause = "is already in use"
                else:
                    cause = f"cannot be bound ({exc.strerror or exc})"
                raise PortProblem(
                    f"port {p.port} on {bind_host} ({p.what}) {cause}; stop what uses it "
                    f"or choose other ports with {p.option}"
                ) from None
