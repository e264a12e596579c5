"""The layering contract (docs/architecture.md, docs/client.md "parts") for client/: no
store/, broker/ or raft/ imports; the subpackages depend on each other in one order; no
module imports a producer or consumer facade back; pure modules stay pure (no asyncio or
sockets, and only pure client modules). (tests/unit/test_layering.py could take these over.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "src" / "ledgermq" / "client"
PURE = {
    "errors.py",
    "message.py",
    "tls.py",
    "instance/namesrv.py",
    "instance/publish_info.py",
    "instance/announcements.py",
    "instance/pull_result.py",
    "producer/failover.py",
    "producer/fault.py",
    "producer/outgoing.py",
    "producer/settings.py",
    "producer/selector.py",
    "consumer/allocate.py",
    "consumer/common.py",
    "consumer/settings.py",
    "push/settings.py",
    "push/pull_decider.py",
    "lite_pull/settings.py",
}
# Who may import whom: a module imports its own package and lower ranks only; two
# packages of one rank know nothing of each other (the producer and the consumers'
# machinery; the push and the lite pull consumer).
RANK = {
    "": 0,  # errors.py, message.py: the vocabulary every part shares
    "instance": 1,  # the shared client instance, routes, name servers, the broker API
    "producer": 2,
    "consumer": 2,  # the consumers' shared machinery
    "push": 3,
    "lite_pull": 3,
    "sync": 4,  # the blocking facade, over the asyncio facades
}
FACADES = {"producer/producer.py", "producer/transaction.py", "push/consumer.py", "lite_pull/consumer.py"}
# The facades may build on each other (a transaction producer is a producer, a push
# consumer re-sends through a producer), and the package and its blocking facade on them.
MAY_IMPORT_FACADES = FACADES | {"__init__.py"}


def _rel(path: Path) -> str:
    return path.relative_to(CLIENT).as_posix()


def _package(rel: str) -> str:
    return rel.split("/")[0] if "/" in rel else ""


def _imports(path: Path) -> set[str]:
    """Every absolute import, TYPE_CHECKING ones included: a type-only import back into a
    facade is still a part knowing its facade."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "ledgermq.client":  # "from ledgermq.client import sync"
                names.update(f"ledgermq.client.{a.name}" for a in node.names)
    return names


def _client_modules(path: Path) -> set[str]:
    """The client modules ``path`` imports, as paths relative to client/."""
    out: set[str] = set()
    for name in _imports(path):
        if not name.startswith("ledgermq.client."):
            continue
        rel = name.removeprefix("ledgermq.client.").replace(".", "/")
        if (CLIENT / f"{rel}.py").exists():
            out.add(f"{rel}.py")
        elif (CLIENT / rel / "__init__.py").exists():
            out.add(f"{rel}/__init__.py")
    return out


MODULES = sorted(CLIENT.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_client_does_not_reach_into_the_server(path: Path) -> None:
    bad = {n for n in _imports(path) if n.startswith(("ledgermq.store", "ledgermq.broker", "ledgermq.raft"))}
    assert not bad, f"{_rel(path)} imports {sorted(bad)}"
    if _rel(path) in PURE:
        impure = {n for n in _imports(path) if n.split(".")[0] in {"asyncio", "socket", "selectors", "ssl"}}
        assert not impure, f"{_rel(path)} imports {sorted(impure)}"


@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_client_modules_import_only_pure_client_modules(name: str) -> None:
    ours = _client_modules(CLIENT / name)
    assert ours <= PURE, f"{name} imports {sorted(ours - PURE)}"


@pytest.mark.parametrize("path", [p for p in MODULES if _rel(p) != "__init__.py"], ids=_rel)
def test_subpackages_depend_in_one_order(path: Path) -> None:
    rel = _rel(path)
    here = _package(rel)
    assert here in RANK, f"{rel}: a new subpackage needs its place in RANK (and in docs/client.md)"
    for target in _client_modules(path):
        there = _package(target)
        if there == here:
            continue
        assert RANK[there] < RANK[here], f"{rel} ({here or 'client'}) imports {target} ({there or 'client'})"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_part_imports_a_facade_back(path: Path) -> None:
    rel = _rel(path)
    if rel in MAY_IMPORT_FACADES or _package(rel) == "sync":
        return
    facades = _client_modules(path) & FACADES
    assert not facades, f"{rel} imports the facade(s) {sorted(facades)}: hand it what it needs instead"


def test_the_rules_see_every_facade_and_package() -> None:
    """The tables above name what exists: a renamed facade or package fails here, not silently."""
    assert all((CLIENT / f).exists() for f in FACADES | PURE)
    packages = {p.name for p in CLIENT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(RANK) - {""}
