"""A real Spark standalone cluster for fault tests: a master and a worker, each its own JVM
started with PySpark's own ``bin/spark-class``; executors are JVMs the worker launches.

Everything binds 127.0.0.1 on free ports, logs and work dirs live under the test's
directory, and ``close`` ends every process by the pid it was started with (the worker's
executors by theirs, found as the worker's children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from ledgermq.testing.ports import free_port
from tests.compat.cluster import tail, tcp_open, wait_until

HOST = "127.0.0.1"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
START_TIMEOUT = 180.0  # each of two JVMs, on a loaded two-core machine


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOG_DIR=str(root / "logs"),
        SPARK_WORKER_DIR=str(root / "work"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class SparkStandalone:
    """``with SparkStandalone(root) as spark: spark.master_url``; ``executor_pids()`` to kill."""

    def __init__(self, root: Path, *, cores: int = 2, memory: str = "1g") -> None:
        self.root = root
        for d in ("logs", "work"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.worker_port = free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.cores = cores
        self.memory = memory
        self.master: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []

    def __enter__(self) -> SparkStandalone:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=spark_env(self.root),
            start_new_session=True,
        )  # fmt: skip

    def start(self) -> None:
        self.master = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
             "--webui-port", str(free_port())],
        )  # fmt: skip
        wait_until("the Spark master's port", lambda: self._alive("master") and tcp_open(self.port), START_TIMEOUT,
                   0.5, self.explain)  # fmt: skip
        self.worker = self._spawn(
            "worker",
            ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(self.worker_port),
             "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
             "--work-dir", str(self.root / "work"), self.master_url],
        )  # fmt: skip
        wait_until("the Spark worker's registration", self._worker_registered, START_TIMEOUT, 0.5, self.explain)

    def _alive(self, name: str) -> bool:
        proc = self.master if name == "master" else self.worker
        if proc is None or proc.poll() is not None:
            raise AssertionError(f"the Spark {name} exited:\n{tail(self.root / f'{name}.log')}")
        return True

    def _worker_registered(self) -> bool:
        self._alive("worker")
        text = (self.root / "worker.log").read_text(errors="replace")
        return "Successfully registered with master" in text

    def executor_pids(self) -> list[int]:
        """The executor JVMs the worker runs now."""
        if self.worker is None or self.worker.poll() is not None:
            return []
        return sorted(p for p in children_of(self.worker.pid) if EXECUTOR_CLASS in cmdline(p))

    def kill_executor(self, pid: int) -> bool:
        """SIGKILL one executor JVM by its pid; False when it was already gone."""
        if pid not in self.executor_pids():
            return False
        os.kill(pid, signal.SIGKILL)
        return True

    def explain(self) -> str:
        return "".join(f"\n--- {n} ---\n{tail(self.root / f'{n}.log', 25)}" for n in ("master", "worker"))

    def close(self) -> None:
        executors = self.executor_pids()
        for proc in (self.worker, self.master):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        deadline = time.monotonic() + 10
        for pid in executors:  # the worker ends its executors on SIGTERM; make sure
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists() and EXECUTOR_CLASS in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        for log in self._logs:
            log.close()
        self._logs.clear()
