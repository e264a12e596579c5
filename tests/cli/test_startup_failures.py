"""``ledgermq broker`` / ``ledgermq namesrv`` that cannot start say why in one line, exit
non-zero and leave nothing behind: no abort file (the store was not left "not cleanly
stopped"), no lock held, no "Task was destroyed but it is pending!"."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgermq.testing.ports import free_port

CMD = [sys.executable, "-m", "ledgermq.cli.main"]


def _conf(tmp_path: Path, store: Path, port: int, metrics_port: int, name: str = "b.properties") -> Path:
    conf = tmp_path / name
    conf.write_text(
        "brokerName=broker-x\nbrokerIP1=127.0.0.1\nlistenHost=127.0.0.1\n"
        f"listenPort={port}\nmetricsPort={metrics_port}\nstorePathRootDir={store}\n"
        "mappedFileSizeCommitLog=1048576\n"
    )
    return conf


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=30)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0] and "Task was destroyed" not in lines[0]
    return lines[0]


@pytest.mark.parametrize(("which", "key"), [(0, "listenPort"), (1, "haListenPort"), (2, "metricsPort")])
def test_broker_on_a_taken_port_says_which_in_one_line_and_leaves_no_abort_file(
    tmp_path: Path, which: int, key: str
) -> None:
    port = free_port(span=3)
    store = tmp_path / "store"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + which))
        taken.listen()
        line = _one_line(_run(["broker", "-c", str(_conf(tmp_path, store, port, port + 2))]))
    assert f"127.0.0.1:{port + which}" in line and "already in use" in line and key in line, line
    assert (store / "lock").exists()  # the store was opened (and recovered) ...
    assert not (store / "abort").exists()  # ... and closed cleanly again


def test_second_broker_on_a_store_says_it_is_in_use_and_leaves_the_first_alone(tmp_path: Path) -> None:
    store = tmp_path / "store"
    port, other = free_port(span=3), free_port(span=3)
    first = subprocess.Popen(
        [*CMD, "broker", "-c", str(_conf(tmp_path, store, port, 0))], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not (store / "abort").exists():  # the first one runs
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        line = _one_line(_run(["broker", "-c", str(_conf(tmp_path, store, other, 0, "b2.properties"))]))
        assert f"store directory {store} is in use" in line and "storePathRootDir" in line, line
        assert first.poll() is None  # untouched
    finally:
        first.terminate()
        first.wait(20)
    assert first.returncode == 0
    assert not (store / "abort").exists()


def test_namesrv_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        line = _one_line(_run(["namesrv", "--host", "127.0.0.1", "-p", str(port)]))
    assert f"127.0.0.1:{port}" in line and "already in use" in line and "--port" in line, line
