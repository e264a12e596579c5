"""Spark's own servers as real processes, started from the scripts inside the pyspark wheel.

A Spark Connect server (``sbin/start-connect-server.sh --wait``) and a standalone cluster
(``bin/spark-class`` of the Master and Worker classes): each runs in a session of its own,
so that killing its process group by the pid we started ends the JVM and the Python workers
it forked. Everything binds 127.0.0.1 on free ports; logs, pid files, work and conf
directories live under the test's directory. Every wait is a bounded poll.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from tests.compat.cluster import HOST, tail, tcp_open, wait_until

START_TIMEOUT = 180.0  # a JVM start on a loaded 2-core machine


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(work: Path) -> dict[str, str]:
    """The environment of a Spark server: its Python workers run this interpreter (which imports
    ledgermq and pyarrow), its logs, pids and conf stay under ``work``."""
    for sub in ("logs", "pids", "conf", "work"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    return dict(
        os.environ,
        SPARK_HOME=str(spark_home()),
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work / "pids"),
        SPARK_CONF_DIR=str(work / "conf"),
        SPARK_WORKER_DIR=str(work / "work"),
        SPARK_LOCAL_IP=HOST,
        SPARK_NO_DAEMONIZE="1",
    )


class SparkProcess:
    """One Spark server process; output to ``log_path``; ``kill`` ends its whole process group."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def check_alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{tail(self.log_path)}")
        return True

    def wait_port(self, port: int, timeout: float = START_TIMEOUT) -> None:
        wait_until(f"{self.name} to listen on {port}", lambda: self.check_alive() and tcp_open(port), timeout, 0.5)

    def wait_log(self, text: str, timeout: float = START_TIMEOUT) -> None:
        def seen() -> bool:
            self.check_alive()
            try:
                return text in self.log_path.read_text(errors="replace")
            except OSError:
                return False

        wait_until(f"{self.name} to log {text!r}", seen, timeout, 0.5, describe=lambda: tail(self.log_path, 20))

    def kill(self) -> None:
        """SIGTERM to the process group (the JVM and its Python workers), SIGKILL after 15 s."""
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(self.proc.pid):
                self.proc.poll()
                time.sleep(0.2)
            if not _group_alive(self.proc.pid):
                break
        self.proc.poll()
        self._log.close()


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (the leader counts until ``poll`` reaps it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def start_connect_server(work: Path, port: int, extra_conf: dict[str, str] | None = None) -> SparkProcess:
    """``sbin/start-connect-server.sh --wait`` on ``127.0.0.1:port`` with a local[2] master."""
    conf = {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        "spark.driver.memory": "768m",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -Xss4m",
        **(extra_conf or {}),
    }
    args = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    server = SparkProcess("the Spark Connect server", args, spark_env(work), work / "connect-server.log")
    try:
        server.wait_port(port)
    except BaseException:
        server.kill()
        raise
    return server
