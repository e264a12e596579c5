"""`ledgermq cluster up --mode controller` as a new user meets it: the banner names the
master; kill -9 of the master's pid (from its pid file) and the banner's own send snippet,
pasted into a Python that already ran its imports, is answered SEND_OK again within 2 s;
the supervisor restarts the killed broker, which returns as the new master's slave; Ctrl-C
stops everything cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ledgermq.testing.ports import free_port
from tests.cli.cluster_proc import ClusterUp, pid_of

DONE = "<<snippet line done>>"
# A minimal interactive Python: each line read is run as the REPL runs it ("single" prints
# an expression's value), then a marker; an error is printed, not fatal.
REPL = f"""
import sys, traceback
ns = {{}}
for line in sys.stdin:
    try:
        exec(compile(line, "<stdin>", "single"), ns)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
    print({DONE!r}, flush=True)
"""


class Repl:
    """A Python the test types lines into, as a user pastes the banner's snippet."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", REPL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._out: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self._out.append(line)
                self._cond.notify_all()

    def run(self, line: str, timeout: float) -> str:
        """Type ``line``; what it printed (bounded)."""
        with self._cond:
            start = len(self._out)
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(DONE in ln for ln in self._out[start:]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{line!r} did not finish within {timeout:.0f}s: {''.join(self._out[start:])}")
                self._cond.wait(left)
            return "".join(ln for ln in self._out[start:] if DONE not in ln)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def snippet(banner: str) -> tuple[list[str], str]:
    """The banner's imports and its send line, as printed (indentation removed)."""
    lines = [ln.strip() for ln in banner.splitlines()]
    imports = [ln for ln in lines if ln.startswith("from ledgermq.client")]
    send = next(ln for ln in lines if ln.startswith("with SyncProducer("))
    return imports, send


def test_kill_9_of_the_master_the_banner_snippet_sends_again_within_2_s(tmp_path: Path) -> None:
    ns_port, p1, p2 = free_port(span=2), free_port(span=3), free_port(span=3)
    up = ClusterUp("--mode", "controller", "--data", str(tmp_path), "--namesrv-port", str(ns_port),
                   "--broker-port", str(p1), "--slave-port", str(p2), "--timeout", "30")  # fmt: skip
    repl = Repl()
    try:
        up.wait_for("Ctrl-C stops the cluster", timeout=60)
        banner = up.output
        master_line = up.wait_for("   master   ", timeout=1)
        slave_line = up.wait_for("   slave   ", timeout=1)
        assert "broker-a 1" in master_line and "broker-a 2" in slave_line, banner
        assert "in sync: 1,2" in banner, banner  # a master's loss has someone to elect
        assert f"controllerAddr=127.0.0.1:{ns_port}" in banner
        imports, send = snippet(banner)
        for line in imports:
            assert "Error" not in repl.run(line, timeout=30)
        assert "SEND_OK" in repl.run(send, timeout=15)

        os.kill(pid_of(tmp_path, "broker-a-1"), signal.SIGKILL)
        killed = time.monotonic()
        while True:  # the user sends again, and again, until it works
            out = repl.run(send, timeout=15)
            if "SEND_OK" in out:
                break
            assert time.monotonic() - killed < 2.0, out
        took = time.monotonic() - killed
        print(f"\nkill -9 of the master -> the snippet's SEND_OK: {took * 1000:.0f} ms")
        assert took < 2.0, up.output

        up.wait_for(f"broker-a 2 (127.0.0.1:{p2}) is now MASTER", timeout=5)
        up.wait_for("broker-a 1 exited with -9; restarting in 1 s", timeout=5)
        up.wait_for(f"broker-a 1 (127.0.0.1:{p1}) is now SLAVE", timeout=30)
        up.wait_for(f"broker-a 2 (127.0.0.1:{p2}) master, in sync now: 1,2", timeout=30)
        assert "SEND_OK" in repl.run(send, timeout=15)
        assert up.interrupt() == 0, up.output
    finally:
        repl.close()
        up.kill()
    for replica in ("1", "2"):
        assert not (tmp_path / f"broker-a-{replica}" / "abort").exists()  # each stopped cleanly
