"""Running a streaming query of a test to its end, through the one Spark start-up failure a loaded
machine provokes.

Spark starts the driver-side Python process of a Python streaming source (its
``PythonStreamingSourceRunner``, created when a query begins) as a "simple worker" and gives it a
fixed 10 s to start and connect back. The 10 s are a constant of ``PythonWorkerFactory``
(``Selector.select(10000)`` in Spark 4.x); no configuration key changes them:
``spark.python.authenticate.socketTimeout`` bounds the handshake once the worker has connected,
and ``spark.python.use.daemon`` does not apply to this runner. The worker imports pyspark from
``pyspark.zip`` (which Spark puts first on its ``PYTHONPATH``) and a zip import compiles every
module again, about 1 s of CPU: at load average 10 on two cores that is more than 10 s of wall
time, and the query fails with "Python worker failed to connect back" before its first batch.

Restarting such a query (from its checkpoint) is what any supervisor of a streaming query does,
so these helpers do it, a bounded number of times, for that failure only, and say so with a
warning; every other outcome goes back to the test unchanged.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

WORKER_START_FAILURE = "Python worker failed to connect back"
WORKER_START_RETRIES = 3


class WorkerStartRetry(UserWarning):
    """A query was restarted because Spark's Python worker did not connect back in time."""


def worker_start_failed(query: Any) -> bool:
    """Whether ``query`` (ended) failed because Spark's Python worker did not connect back in time."""
    failure = query.exception()
    return failure is not None and WORKER_START_FAILURE in str(failure)


def run_to_end(start: Callable[[], Any], timeout: float) -> Any:
    """Start the query ``start()`` returns and wait up to ``timeout`` seconds (for each start) for
    it to end, restarting it at most ``WORKER_START_RETRIES`` times when it failed because Spark's
    Python worker did not connect back. Returns the last query, ended: the test asserts on its
    ``exception()`` and progress. Fails when a query is still running after ``timeout``."""
    query = _run_once(start, timeout)
    for attempt in range(2, WORKER_START_RETRIES + 2):
        if not worker_start_failed(query):
            break
        warnings.warn(
            f"restarting a streaming query (start {attempt}): {WORKER_START_FAILURE} within Spark's fixed 10 s",
            WorkerStartRetry,
            stacklevel=2,
        )
        query = _run_once(start, timeout)
    return query


def _run_once(start: Callable[[], Any], timeout: float) -> Any:
    from pyspark.errors import StreamingQueryException

    query = start()
    began = time.monotonic()
    try:
        ended = query.awaitTermination(timeout)
    except StreamingQueryException:
        ended = True  # a failed query raises here; query.exception() has it
    if not ended:
        query.stop()
        raise AssertionError(f"the streaming query did not end in {time.monotonic() - began:.0f}s")
    return query
