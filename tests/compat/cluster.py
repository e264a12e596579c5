"""A name server and a broker as real processes (``python -m ledgermq.cli.main``), and the C++ client child.

Everything binds 127.0.0.1 on ports picked by binding port 0; data and logs live under the test's tmp_path.
Waits are bounded polls: a TCP connect loop for each server, then a GET_ROUTEINFO_BY_TOPIC(TBW102) on the name
server until the broker's master address shows up. ``Cluster.close`` kills whatever is still running.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ledgermq.acl.signing import Credentials, signer
from ledgermq.broker.metadata_log import read_current
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import TopicRouteData
from ledgermq.testing.ports import free_port

HOST = "127.0.0.1"
HAVE_CPP_CLIENT = importlib.util.find_spec("rocketmq") is not None  # checked without loading librocketmq.so here
CLIENT_SCRIPT = Path(__file__).with_name("cpp_client.py")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0


def broker_writable(addr: str, credentials: Credentials | None = None) -> bool:
    """Whether the broker's store takes writes (runtime info ``writeFence`` is empty); requests are
    signed with ``credentials`` for a broker with aclEnable=true."""

    async def ask() -> bool:
        client = RemotingClient(sign=signer(credentials) if credentials is not None else None)
        try:
            resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=2.0)
            table = json.loads(resp.body or b"{}").get("table") or {}
            return resp.code == ResponseCode.SUCCESS and not table.get("writeFence")
        finally:
            await client.close()

    try:
        return asyncio.run(ask())
    except Exception:
        return False


def wait_until(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    interval: float = 0.1,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` until it returns something truthy; AssertionError naming ``what`` (and ``describe()``, the
    state at the deadline) on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            state = f" ({describe()})" if describe is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{state}")
        time.sleep(interval)


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def route(namesrv_addr: str, topic: str) -> TopicRouteData | None:
    """GET_ROUTEINFO_BY_TOPIC through our own remoting client; None unless SUCCESS."""

    async def ask() -> TopicRouteData | None:
        client = RemotingClient(connect_timeout=1.0)
        try:
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            resp = await client.invoke(namesrv_addr, cmd, timeout=2.0)
        finally:
            await client.close()
        if resp.code != ResponseCode.SUCCESS:
            return None
        return TopicRouteData.decode(resp.body)

    try:
        return asyncio.run(ask())
    except Exception:
        return None


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerProcess:
    """One ``ledgermq -v <args>`` process; stdout and stderr go to a log file (appended across restarts).

    ``env`` adds variables to the child's environment; ``module`` runs another entry point
    with the same command line (``ledgermq.cli.chaos_child`` arms LEDGERMQ_FAILPOINTS first)."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log_path: Path,
        *,
        module: str = "ledgermq.cli.main",
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self.module = module
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is already running"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        self._log.write(f"===== start {self.name}: {' '.join(self.args)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "-v", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **self.env} if self.env else None,
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{tail(self.log_path)}")
        return True

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it did not exit in time; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class Cluster:
    """One name server and one master broker under ``root``."""

    def __init__(
        self,
        root: Path,
        broker_name: str = "compat-a",
        *,
        credentials: Credentials | None = None,
        **broker_props: object,
    ) -> None:
        self.root = root
        self.credentials = credentials  # the harness's own requests to an aclEnable=true broker
        self.root.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = free_port()
        self.broker_port = free_port(span=2)
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        self.broker_addr = f"{HOST}:{self.broker_port}"
        self.cluster_name = "CompatCluster"
        self.broker_name = broker_name
        self.store_dir = root / "store"
        props: dict[str, object] = {
            "brokerClusterName": self.cluster_name,
            "brokerName": broker_name,
            "brokerId": 0,
            "listenPort": self.broker_port,
            "listenHost": HOST,
            "brokerIP1": HOST,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": self.store_dir,
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 10_000,
            "flushConsumerOffsetInterval": 500,
            **broker_props,
        }
        self.broker_conf = root / "broker.properties"
        self.broker_conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.namesrv = ServerProcess(
            "namesrv",
            ["namesrv", "-p", str(self.namesrv_port), "--host", HOST, "--kv-config", str(root / "kvConfig.json")],
            root / "namesrv.log",
        )
        self.broker = ServerProcess("broker", ["broker", "-c", str(self.broker_conf)], root / "broker.log")
        self.client_home = root / "cpp-home"  # the C++ client logs under $HOME/logs/rocketmq-cpp
        self.client_home.mkdir(exist_ok=True)
        self._specs = 0
        self.children: list[ClientChild] = []

    # -- processes ---------------------------------------------------------------------------
    def start(self) -> None:
        self.namesrv.start()
        wait_until(
            "the name server's port", lambda: self.namesrv.check_alive() and tcp_open(self.namesrv_port), START_TIMEOUT
        )
        self.start_broker()

    def start_broker(self) -> None:
        self.broker.start()
        wait_until("the broker's port", lambda: self.broker.check_alive() and tcp_open(self.broker_port), START_TIMEOUT)
        wait_until("the broker's registration (TBW102 route)", self.broker_registered, START_TIMEOUT, 0.2)
        # A master that restarted after a crash fences writes until its slave reconciles with it.
        writable = lambda: broker_writable(self.broker_addr, self.credentials)  # noqa: E731
        wait_until("the broker to take writes", writable, START_TIMEOUT, 0.1)

    def broker_registered(self, require_alive: bool = True) -> bool:
        """Does the name server's TBW102 route list this broker as master?"""
        if require_alive:
            self.broker.check_alive()
        data = route(self.namesrv_addr, "TBW102")
        return data is not None and any(b.broker_addrs.get(0) == self.broker_addr for b in data.broker_datas)

    def stop_broker(self) -> int | None:
        return self.broker.stop()

    def close(self) -> None:
        for child in self.children:
            child.kill()
        self.broker.kill()
        self.namesrv.kill()

    def explain(self) -> str:
        return (
            f"\n--- broker log ({self.broker.log_path}) ---\n{tail(self.broker.log_path)}"
            f"\n--- namesrv log ({self.namesrv.log_path}) ---\n{tail(self.namesrv.log_path, 15)}"
            f"\n--- C++ client errors (logs under {self.client_home / 'logs'}) ---\n{self.client_errors()}"
        )

    def client_errors(self, lines: int = 12) -> str:
        """The last error/warning lines of the C++ client logs of this cluster's children."""
        found: list[str] = []
        for path in sorted((self.client_home / "logs").glob("**/*.log*")):
            found += [
                ln for ln in path.read_text(errors="replace").splitlines() if "(error)" in ln or "(warning)" in ln
            ]
        return "\n".join(found[-lines:]) or "(none)"

    # -- broker state on disk ------------------------------------------------------------------
    def persisted_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The broker's saved offsets of topic@group: config/consumerOffset.json with its change
        log replayed ({} when absent or unreadable)."""
        path = self.store_dir / "config" / "consumerOffset.json"
        try:
            doc = read_current(path, "offsetTable")
        except Exception:
            return {}
        table = (doc.get("offsetTable") or {}).get(f"{topic}@{group}") or {}
        return {int(q): int(o) for q, o in table.items()}

    # -- C++ client child -------------------------------------------------------------------------
    def _spec_file(self, steps: list[dict[str, Any]]) -> Path:
        self._specs += 1
        path = self.root / f"client-spec-{self._specs}.json"
        path.write_text(json.dumps({"namesrv": self.namesrv_addr, "steps": steps}))
        return path

    def _client_env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.client_home)}

    def run_client(self, steps: list[dict[str, Any]], timeout: float = 60.0) -> list[dict[str, Any]]:
        """Run the steps in a C++ client child; the per-step results. Fails on timeout, crash or error."""
        spec = self._spec_file(steps)
        try:
            done = subprocess.run(
                [sys.executable, str(CLIENT_SCRIPT), str(spec)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                env=self._client_env(),
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"C++ client child timed out after {timeout}s\nstdout: {_text(exc.stdout)}\nstderr: "
                f"{_text(exc.stderr)}{self.explain()}"
            ) from exc
        return self._parse_result(done.returncode, done.stdout, done.stderr)

    def send_and_consume(self, topic: str, steps: list[dict[str, Any]], timeout: float = 60.0) -> list[dict[str, Any]]:
        """``steps[0]`` (a send) in one child; once the name server routes ``topic``, the rest in a second child.

        A consumer must not start before the name server knows the topic: the C++ client then knows no broker,
        sends no heartbeat until its 30 s timer, and every rebalance until then fails ("no consumer for this
        group"). The broker registers a topic auto-created by a send asynchronously (see the route visibility test).
        """
        sent = self.run_client(steps[:1], timeout)
        self.wait_route(topic)
        return sent + self.run_client(steps[1:], timeout)

    def wait_route(self, topic: str, timeout: float = 10.0) -> TopicRouteData:
        def check() -> TopicRouteData | None:
            self.broker.check_alive()
            data = route(self.namesrv_addr, topic)
            if data is not None and any(b.broker_addrs.get(0) == self.broker_addr for b in data.broker_datas):
                return data
            return None

        found: TopicRouteData = wait_until(f"the name server to route {topic}", check, timeout, 0.05)
        return found

    def start_client(self, steps: list[dict[str, Any]]) -> ClientChild:
        return ClientChild(self, self._spec_file(steps))

    def _parse_result(self, rc: int | None, stdout: bytes, stderr: bytes) -> list[dict[str, Any]]:
        result = None
        for line in _text(stdout).splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
        if rc != 0 or result is None or "error" in result:
            raise AssertionError(
                f"C++ client child failed (exit {rc})\nstdout: {_text(stdout)[-4000:]}\n"
                f"stderr: {_text(stderr)[-4000:]}{self.explain()}"
            )
        steps: list[dict[str, Any]] = result["steps"]
        return steps


class ClientChild:
    """A C++ client child whose push step holds (``"hold": true``): wait for READY, then release it."""

    def __init__(self, cluster: Cluster, spec: Path) -> None:
        self.cluster = cluster
        self.proc = subprocess.Popen(
            [sys.executable, str(CLIENT_SCRIPT), str(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cluster._client_env(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()
        cluster.children.append(self)

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = _text(raw).rstrip("\n")
            self.stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw)

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = None
                if time.monotonic() < deadline:
                    continue
            if line is not None and line.startswith("READY "):
                summary: dict[str, Any] = json.loads(line[len("READY ") :])
                return summary
            if line is None:
                self.kill()
                raise AssertionError(
                    f"C++ client child ended or timed out before READY\nstdout: {self.stdout}\n"
                    f"stderr: {_text(b''.join(self.stderr))[-4000:]}{self.cluster.explain()}"
                )

    def release(self, timeout: float) -> list[dict[str, Any]]:
        """Let the held step finish; the per-step results."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        for t in self._readers:
            t.join(5)
        return self.cluster._parse_result(self.proc.returncode, "\n".join(self.stdout).encode(), b"".join(self.stderr))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", "replace")
