"""``ledgermq cluster up`` as a real process for tests: its output read on a thread so every
wait has a deadline, and raw pull/send helpers that talk to one broker by address."""

from __future__ import annotations

import asyncio
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ledgermq.errors import LedgerError
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.admin.servers import send_message


class ClusterUp:
    """``cluster up`` with ``args``; without the web console unless ``--console-port`` is among them
    (its default port 8080 may be taken on a shared machine, and these tests are about brokers)."""

    def __init__(self, *args: str) -> None:
        console = () if "--console-port" in args else ("--no-console",)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgermq.cli.main", "cluster", "up", *args, *console],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line (from now on, or already read) containing ``text``."""
        for line in self.lines:
            if text in line:
                return line
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout:.0f}s:\n{self.output}")

    def finish(self, timeout: float) -> int:
        """Wait for exit; its return code (all output read)."""
        rc = self.proc.wait(timeout)
        while True:
            try:
                line = self._queue.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return rc

    def interrupt(self, timeout: float = 40) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.finish(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def output(self) -> str:
        return "".join(self.lines)


def pid_of(data: Path, name: str) -> int:
    return int((data / "run" / f"{name}.pid").read_text())


def send(addr: str, topic: str, body: bytes, timeout: float = 10.0) -> None:
    """Send until the broker takes it: a master restarted after a crash refuses sends until
    its slave has returned what it may have lost."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            asyncio.run(send_message(addr, topic, body))
            return
        except (AssertionError, OSError, LedgerError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def pull_bodies(addr: str, topic: str, expect: bytes, timeout: float) -> bytes:
    """Pull queue 0 of ``topic`` from the broker at ``addr`` (master or slave) until the
    messages hold ``expect``; the raw messages."""

    async def pull() -> bytes:
        client = RemotingClient()
        try:
            cmd = RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {"consumerGroup": "cg", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                 "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                 "subVersion": 0},
            )  # fmt: skip
            resp = await client.invoke(addr, cmd, 3.0)
            return resp.body or b"" if resp.code == ResponseCode.SUCCESS else b""
        except Exception:
            return b""
        finally:
            await client.close()

    deadline = time.monotonic() + timeout
    while True:
        body = asyncio.run(pull())
        if expect in body:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{expect!r} not readable from {addr} within {timeout:.0f}s")
        time.sleep(0.2)
