"""``make test``'s scheduling of the Spark tests (``xdist_scope``): the Spark package is one unit of
work, handed out before everything else; every other file stays a unit of its own."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.spark.xdist_scope import SPARK_SCOPE, pytest_xdist_make_scheduler, scope_of

pytest.importorskip("xdist", reason="pytest-xdist is not installed (the 'test' extra)")

# a file with more tests than the whole Spark package: xdist alone would hand it out first
COLLECTION = [
    *(f"tests/store/test_a.py::test_{i}" for i in range(9)),
    "tests/spark/test_connect.py::test_batch",
    *(f"tests/spark/test_units.py::test_options[{i}]" for i in range(3)),
    "tests/store/test_b.py::test_1",
    "tests/sparkle/test_c.py::test_1",
]


class FakeConfig:
    def __init__(self, dist: str) -> None:
        self.values = {"dist": dist, "tx": ["2*popen"], "numprocesses": 2}
        self.option = SimpleNamespace(loadscopereorder=True)

    def getvalue(self, name: str) -> Any:
        return self.values[name]


class FakeNode:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[str] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += [COLLECTION[i] for i in indexes]

    def shutdown(self) -> None:
        self.shutting_down = True


def test_scopes() -> None:
    assert scope_of("tests/spark/test_units.py::test_options[1]", "x") == SPARK_SCOPE
    assert scope_of("tests/sparkle/test_c.py::test_1", "tests/sparkle/test_c.py") == "tests/sparkle/test_c.py"


def test_the_spark_package_is_one_unit_given_out_first() -> None:
    sched = pytest_xdist_make_scheduler(FakeConfig("loadfile"), None)  # type: ignore[arg-type]
    first, second = FakeNode("gw0"), FakeNode("gw1")
    for node in (first, second):
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    assert first.sent == [n for n in COLLECTION if n.startswith("tests/spark/")]
    # the other worker gets the rest, file by file (so it has work for longer than two tests)
    assert second.sent and not any(n.startswith("tests/spark/") for n in second.sent)
    assert set(second.sent) < {n for n in COLLECTION if not n.startswith("tests/spark/")}


def test_other_distributions_are_left_to_xdist() -> None:
    assert pytest_xdist_make_scheduler(FakeConfig("load"), None) is None  # type: ignore[arg-type]
