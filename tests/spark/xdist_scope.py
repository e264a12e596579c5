"""How ``make test`` hands the Spark tests to its pytest workers (loaded with ``-p
tests.spark.xdist_scope``; without it ``--dist loadfile`` still runs them, only slower).

With ``--dist loadfile`` every file is a unit of work, and pytest-xdist starts the units with
the most tests first. The Spark files would then be spread over both workers, each starting
its own local SparkSession JVM and broker, and the files with one or two long tests (the
fault test, the standalone cluster, Spark Connect: minutes each) would be handed out last,
where one of them decides when the whole run ends.

So the whole ``tests/spark`` package is one unit, given out first: its JVMs start once
(package-scoped fixtures in ``tests/spark/conftest.py``, stopped as soon as its last test
ends), and its minutes run while the other worker works through everything else. Every
other file stays a unit of its own, in pytest-xdist's order.
"""

from __future__ import annotations

from typing import Any

import pytest

SPARK_SCOPE = "tests/spark"


def scope_of(nodeid: str, default: str) -> str:
    """The Spark package's tests share one scope; anything else keeps ``default``."""
    return SPARK_SCOPE if nodeid.startswith(SPARK_SCOPE + "/") else default


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkFirstLoadFileScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, super()._split_scope(nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            if SPARK_SCOPE in self.workqueue:
                self.workqueue.move_to_end(SPARK_SCOPE, last=False)
            super()._assign_work_unit(node)

    return SparkFirstLoadFileScheduling(config, log)
