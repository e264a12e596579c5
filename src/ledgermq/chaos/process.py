"""One child process of a layout: spawned, SIGKILLed, paused, resumed and reaped by pid.

Children start through ``ledgermq.cli.chaos_child`` (the ``ledgermq`` command line with the
environment's failpoints armed), in their own session, with stdout and stderr appended to
one log per process across restarts. Every signal goes to the pid this object started,
never to a name or a group; a paused child is resumed before it is killed or stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from ledgermq.util.proc import die_with_parent

KILL_WAIT_S = 5.0
STOP_WAIT_S = 15.0


class ChildProcess:
    def __init__(self, name: str, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self._close_log()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in kill()/stop()
        self._log.write(f"===== chaos start {self.name}: {' '.join(self.args)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgermq.cli.chaos_child", "-v", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
            preexec_fn=die_with_parent,  # spawned from the event loop's (main) thread
        )
        self.paused = False
        self.starts += 1

    def send_kill(self) -> None:
        """SIGKILL without waiting (several processes die at once; ``kill`` reaps)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL (a paused process dies too) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        self.paused = False
        self._close_log()

    def stop(self) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after STOP_WAIT_S; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()
        return self.proc.poll()

    def pause(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
