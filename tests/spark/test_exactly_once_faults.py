"""The exactly-once sink under faults on a real Spark standalone cluster (issue #25): executors
SIGKILLed at seeded moments, and the driver killed and restarted from its checkpoint, either
at a placed point of the sink's commit or at a seeded moment (``eo_faults``). With
``exactlyOnce=true`` every input row is on the output topic exactly once; with it off the
same faults write duplicates, deterministically: the first round of both kills the driver
after a batch's rows were all acknowledged and before Spark recorded the batch, so the
re-run batch sends them again (asserted, so the test shows the option matters).

``make test`` runs one round of each (the placed kill at ``spark.sink.before_commit``, an
executor kill, the restart): what the option changes under one and the same fault;
``make spark-faults`` runs ``LEDGERMQ_SPARK_FAULT_ROUNDS=20`` (and
``LEDGERMQ_SPARK_FAULT_SEED``), which go through every commit point, and prints the figures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")

from ledgermq.spark.sink import BEFORE_COMMIT
from tests.compat.cluster import Cluster
from tests.spark.eo_faults import run_rounds
from tests.spark.standalone import SparkStandalone

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("LEDGERMQ_SPARK_FAULT_ROUNDS", "1"))
SEED = int(os.environ.get("LEDGERMQ_SPARK_FAULT_SEED", "1"))
# a round is two driver start-ups (JVMs) and a few micro-batches: about a minute on a loaded machine
TIMEOUT = 1200 + 300 * ROUNDS


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and a broker whose transaction checks run every 3 s on halves older than
    2 s, so the checks meet halves of batches still in flight (their copies must be rolled
    back while the driver commits the originals)."""
    c = Cluster(
        tmp_path_factory.mktemp("spark-eo-brokers"),
        broker_name="spark-eo",
        transactionCheckInterval=3000,
        transactionTimeOut=2000,
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.mark.timeout(TIMEOUT)
def test_exactly_once_through_executor_and_driver_kills(
    standalone: SparkStandalone, brokers: Cluster, tmp_path: Path
) -> None:
    report = run_rounds(tmp_path, brokers, standalone, exactly_once=True, rounds=ROUNDS, seed=SEED)
    print(report.summary())
    assert report.driver_kills == ROUNDS and report.executor_kills >= 1
    assert report.placed[BEFORE_COMMIT] >= 1
    assert not report.missing, f"{len(report.missing)} rows missing, e.g. {report.missing[:5]}"
    assert not report.unexpected
    assert report.duplicated == 0, [k for k, n in report.counts.items() if n > 1][:10]


@pytest.mark.timeout(TIMEOUT)
def test_at_least_once_shows_duplicates_under_the_same_faults(
    standalone: SparkStandalone, brokers: Cluster, tmp_path: Path
) -> None:
    report = run_rounds(tmp_path, brokers, standalone, exactly_once=False, rounds=max(1, ROUNDS // 2), seed=SEED)
    print(report.summary())
    assert not report.missing, f"{len(report.missing)} rows missing, e.g. {report.missing[:5]}"
    assert report.placed[BEFORE_COMMIT] >= 1
    # each driver killed at the point re-runs a batch of at least one row it had sent
    assert report.duplicated >= report.placed[BEFORE_COMMIT], "the placed faults wrote too few duplicates"
