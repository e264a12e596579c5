"""A batch read and write on a real Spark standalone cluster: a master and a worker as processes of their own
(``bin/spark-class`` of the pyspark wheel), the job submitted with ``spark-submit --master spark://...``, its
executors started by the worker. The executors' Python (``spark.pyspark.python``) is an interpreter that has
ledgermq's dependencies but not ledgermq itself, so the job only works if ledgermq reaches the executors the way
docs/spark.md describes for clusters whose machines do not have it: shipped with ``--py-files``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import HOST, Cluster, tail
from tests.spark.conftest import BROKER
from tests.spark.helpers import create_topic, send
from tests.spark.standalone import START_TIMEOUT, SparkStandalone, spark_env, spark_home

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("standalone_job.py")
SUBMIT_TIMEOUT = 400.0


def executor_python(root: Path) -> Path:
    """A virtualenv whose interpreter finds ledgermq's dependencies (this environment's site-packages, added by a
    path file) but not ledgermq: the editable install's own path file is not processed from there."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    (site / "ledgermq-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = root / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import pyarrow, orjson, uvloop, pyspark; import ledgermq"], capture_output=True, timeout=60
    )
    assert b"No module named 'ledgermq'" in probe.stderr, probe.stderr.decode()
    return python


def ledgermq_archive(dest: Path) -> Path:
    """The ledgermq package as a zip (what --py-files takes: .zip, .egg or a pure-Python .whl)."""
    import ledgermq

    package = Path(ledgermq.__file__).parent
    archive = shutil.make_archive(
        str(dest / "ledgermq"), "zip", root_dir=package.parent, base_dir=package.name, logger=None
    )
    return Path(archive)


@pytest.mark.timeout(SUBMIT_TIMEOUT + 2 * START_TIMEOUT + 60)  # the shared cluster may start in its setup
def test_batch_read_and_write_on_a_standalone_cluster(
    standalone: SparkStandalone, cluster: Cluster, tmp_path: Path
) -> None:
    source, target = "StandaloneIn", "StandaloneOut"
    for topic in (source, target):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    sent = send(cluster.namesrv_addr, source, BROKER, {0: 9, 1: 5})

    python = executor_python(tmp_path / "executor-venv")
    archive = ledgermq_archive(tmp_path)
    env = dict(spark_env(tmp_path / "submit"), PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYSPARK_PYTHON", None)  # the executors' interpreter comes from spark.pyspark.python below
    conf = {
        "spark.pyspark.python": str(python),
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        "spark.executor.memory": "768m",
        "spark.executor.cores": "2",
        "spark.cores.max": "2",
        "spark.driver.memory": "768m",
        "spark.sql.shuffle.partitions": "2",
    }
    args = [str(spark_home() / "bin" / "spark-submit"), "--master", standalone.master_url, "--py-files", str(archive)]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    result_file = tmp_path / "result.json"
    args += [str(JOB), cluster.namesrv_addr, source, target, str(result_file)]
    log = tmp_path / "submit.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(SUBMIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"spark-submit did not finish in {SUBMIT_TIMEOUT:.0f}s:\n{tail(log)}") from None
        finally:  # whatever ends the wait (pytest-timeout too), the driver and its Python go with it
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert code == 0, f"spark-submit exited with {code}:\n{tail(log, 60)}"
    assert result_file.exists(), f"the job wrote no result:\n{tail(log, 60)}"
    result: dict[str, Any] = json.loads(result_file.read_text())

    assert result["master"] == standalone.master_url
    assert result["rows"] == sorted([q, o, b.decode()] for q, o, b in sent)
    # the executors' Python workers imported ledgermq from the shipped archive
    origins: list[str] = result["executor_ledgermq"]
    repo = str(Path(__file__).parents[2])
    assert origins and all(archive.name in path and repo not in path for path in origins), origins

    assert sorted(read_values(cluster.namesrv_addr, target)) == sorted(b for _q, _o, b in sent)


def read_values(namesrv: str, topic: str) -> list[bytes]:
    """Every body of ``topic``, read with the source's own reader in this process (no Spark)."""
    from ledgermq.spark.broker import BrokerSession
    from ledgermq.spark.options import parse_read_options
    from ledgermq.spark.planning import QueueRange
    from ledgermq.spark.reading import read_range

    with BrokerSession([namesrv]) as session:
        bounds = session.run(session.bounds(session.run(session.queues(topic))))
    opts = parse_read_options({"namesrvAddr": namesrv, "subscribe": topic}, streaming=False)
    values: list[bytes] = []
    for q, (low, high) in bounds.items():
        for batch in read_range(opts, QueueRange(q, low, high)):
            values += batch.column("value").to_pylist()
    return values
