"""ha/'s pure modules stay pure: bytes, events and decisions in and out, time passed in. They
import no event loop, sockets, threads or clock, and of ledgermq only the errors and each
other, so they are tested without any of those.

Which modules claim purity: ``codec`` and ``session`` (ha/__init__.py, their docstrings,
docs/architecture.md "ha/"), ``epochs`` and ``handshake`` (docs/architecture.md: "pure: the
epoch list and the reconcile decision", "pure codec of the hello and the answer";
handshake's docstring: "Sans-I/O"), ``repair`` (the decision which ranges can be repaired,
from lists of ranges). A module whose docstring claims it (pure, sans-I/O) must be listed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_layering import SRC

PURE_HA = ["codec", "epochs", "handshake", "repair", "session"]
FORBIDDEN = {"asyncio", "socket", "selectors", "ssl", "uvloop", "threading", "time", "concurrent", "subprocess"}
MAY_IMPORT = ("ledgermq.errors", *(f"ledgermq.ha.{m}" for m in PURE_HA))


def impurities(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] if node.module != "ledgermq" else [f"ledgermq.{a.name}" for a in node.names]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            ours_but_impure = top == "ledgermq" and not module.startswith(MAY_IMPORT)
            if top in FORBIDDEN or ours_but_impure:
                found.append(f"{node.lineno}: {module}")
    return found


@pytest.mark.parametrize("name", PURE_HA)
def test_ha_pure_modules_are_pure(name: str) -> None:
    path: Path = SRC / "ha" / f"{name}.py"
    assert not impurities(path.read_text()), f"ha/{name}.py: {impurities(path.read_text())}"


def test_every_ha_module_that_claims_purity_is_checked() -> None:
    claims = set()
    for path in sorted((SRC / "ha").glob("*.py")):
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0].lower()
        if path.stem != "__init__" and ("pure" in doc or "sans-i/o" in doc):
            claims.add(path.stem)
    assert claims <= set(PURE_HA), f"claim purity but are not checked: {sorted(claims - set(PURE_HA))}"


def test_the_check_sees_planted_impurities(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text(
        "import struct\nfrom ledgermq.ha.codec import HEADER\nfrom ledgermq.errors import LedgerError\n"
        "import time\nfrom threading import Lock\nfrom ledgermq.ha.master import HAService\n"
        "def f():\n    import asyncio\n    from ledgermq import clock\n"
    )
    assert impurities(planted.read_text()) == [
        "4: time",
        "5: threading",
        "6: ledgermq.ha.master",
        "8: asyncio",
        "9: ledgermq.clock",
    ]
