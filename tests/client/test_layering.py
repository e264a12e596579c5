"""The layering contract (docs/architecture.md) for client/: no store/, broker/ or raft/ imports; fault and
selector stay pure (no asyncio or sockets). (tests/unit/test_layering.py could take
these over.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "src" / "ledgermq" / "client"
PURE = {
    "producer/fault.py",
    "producer/selector.py",
    "instance/publish_info.py",
    "message.py",
    "errors.py",
    "consumer/allocate.py",
}


def _rel(path: Path) -> str:
    return path.relative_to(CLIENT).as_posix()


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CLIENT.rglob("*.py")), ids=lambda p: _rel(p))
def test_client_does_not_reach_into_the_server(path: Path) -> None:
    bad = {n for n in _imports(path) if n.startswith(("ledgermq.store", "ledgermq.broker", "ledgermq.raft"))}
    assert not bad, f"{path.name} imports {sorted(bad)}"
    if _rel(path) in PURE:
        impure = {n for n in _imports(path) if n.split(".")[0] in {"asyncio", "socket", "selectors", "ssl"}}
        assert not impure, f"{path.name} imports {sorted(impure)}"


@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_client_modules_import_only_pure_client_modules(name: str) -> None:
    ours = {
        n.removeprefix("ledgermq.client.").replace(".", "/") + ".py"
        for n in _imports(CLIENT / name)
        if n.startswith("ledgermq.client.")
    }
    assert ours <= PURE, f"{name} imports {sorted(ours - PURE)}"
