"""Name servers and brokers as real processes with TLS on, for the TLS tests.

Certificates come from a throw-away CA (net/tls/devca.py); the processes are
``tests.compat.cluster.ServerProcess`` children on loopback ports checked free. Readiness
and checks go through our own client with the test's TLS options.
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client.tls import TlsOptions
from ledgermq.net.tls.devca import DevPki, dev_tls_properties, make_dev_pki
from tests.compat.cluster import HOST, ServerProcess, free_port, tail, tcp_open, wait_until

CLUSTER = "TlsCluster"
GROUP = "broker-tls"
START_TIMEOUT = 30.0
PLAIN_REFUSED = "a plain (non-TLS) connection, and this port enforces TLS"


@dataclass
class Member:
    name: str
    port: int
    server: ServerProcess
    log: Path

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def client_options(pki: DevPki) -> TlsOptions:
    return TlsOptions(
        trust_cert_path=str(pki.ca.cert_path), cert_path=str(pki.client.cert_path), key_path=str(pki.client.key_path)
    )


class TlsCluster:
    """A name server and brokers sharing one TLS setup (``server_keys``: the lines every config gets)."""

    def __init__(self, root: Path, server_keys: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.pki = make_dev_pki(root / "pki")
        self.tls_file = root / "pki" / "tls.properties"
        self.tls_file.write_text(dev_tls_properties(self.pki))
        self.server_keys = server_keys.replace("TLS_FILE", str(self.tls_file))
        self.members: list[Member] = []
        port = free_port()
        conf = root / "namesrv.properties"
        conf.write_text(self.server_keys)
        self.namesrv = self._member(
            "namesrv",
            port,
            ["namesrv", "-p", str(port), "--host", HOST, "-c", str(conf), "--kv-config", str(root / "kv.json")],
        )

    def _member(self, name: str, port: int, args: list[str]) -> Member:
        log = self.root / f"{name}.log"
        m = Member(name, port, ServerProcess(name, args, log), log)
        self.members.append(m)
        return m

    def broker(self, name: str, broker_id: int, role: str, **props: object) -> Member:
        port = free_port(span=3)
        store = self.root / name / "store"
        store.mkdir(parents=True, exist_ok=True)
        all_props: dict[str, object] = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerId": broker_id,
            "brokerRole": role,
            "brokerIP1": HOST,
            "listenHost": HOST,
            "listenPort": port,
            "namesrvAddr": self.namesrv.addr,
            "storePathRootDir": store,
            "mappedFileSizeCommitLog": 1024 * 1024,
            "registerNameServerPeriod": 1000,
            "haSendHeartbeatInterval": 1000,
            **props,
        }
        conf = self.root / name / "broker.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in all_props.items()) + self.server_keys)
        return self._member(name, port, ["broker", "-c", str(conf)])

    def start(self, member: Member) -> None:
        member.server.start()
        wait_until(f"{member.name}'s port", lambda: member.server.check_alive() and tcp_open(member.port), 20, 0.05)

    def wait_registered(self, brokers: list[Member], tls: TlsOptions | None) -> None:
        want = {b.addr for b in brokers}

        def registered() -> bool:
            async def ask() -> set[str]:
                async with AdminClient(self.namesrv.addr, timeout=2.0, connect_timeout=1.0, tls=tls) as admin:
                    info = await admin.cluster_info()
                return {a for d in info.broker_addr_table.values() for a in d.broker_addrs.values()}

            for m in self.members:
                m.server.check_alive()
            try:
                return want <= asyncio.run(ask())
            except Exception:
                return False

        wait_until("the brokers' registration", registered, START_TIMEOUT, 0.2, self.explain)

    def explain(self) -> str:
        return "\n".join(f"--- {m.name}\n{tail(m.log)}" for m in self.members)

    def close(self) -> None:
        for m in reversed(self.members):
            m.server.kill()


def plain_probe(port: int) -> bytes:
    """Connect without TLS, send a RocketMQ-looking frame start, return what came back before
    the server closed (b"" when it closed without answering)."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(b"\x00\x00\x00\x10\x00\x00\x00\x0c{}")
        chunks = []
        while True:
            try:
                data = s.recv(4096)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def wait_for_log(member: Member, text: str, timeout: float = 10.0) -> str:
    """The first log line containing ``text`` (polled until ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in member.log_text().splitlines():
            if text in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"{member.name}'s log has no line with {text!r}:\n{tail(member.log)}")


def wait_for_log_file(path: Path, text: str, timeout: float = 10.0) -> str:
    """The first line of the log at ``path`` containing ``text`` (polled until ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            if text in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"{path.name} has no line with {text!r}")


def banner_python_example(banner: list[str]) -> str:
    """``cluster up``'s example for our client, as a script: the indented lines after its heading."""
    start = next(i for i, line in enumerate(banner) if line.startswith("Send and receive with our client"))
    code: list[str] = []
    for line in banner[start + 1 :]:
        if line.strip() and not line.startswith("  "):
            break
        code.append(line)
    return textwrap.dedent("".join(code))
