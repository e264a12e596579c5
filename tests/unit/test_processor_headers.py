"""Processors read request headers only through the typed header classes (protocol/headers_*.py):
no string helper (field, opt_field, int_field, bool_field) and no ``.ext_fields`` access in any
broker or name-server processor module, so a processor never parses a header string again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ledgermq"
PROCESSOR_FILES = [*sorted((SRC / "broker" / "processors").glob("*.py")), SRC / "namesrv" / "processors.py"]
STRING_HELPERS = {"field", "opt_field", "int_field", "bool_field"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ledgermq.protocol.headers":
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in STRING_HELPERS]
        elif isinstance(node, ast.Attribute) and node.attr == "ext_fields":
            found.append(f"line {node.lineno}: reads .ext_fields")
        elif isinstance(node, ast.Attribute) and node.attr in STRING_HELPERS and _is_headers_module(node.value):
            found.append(f"line {node.lineno}: calls headers.{node.attr}")
        elif isinstance(node, ast.Import) and any(a.name == "ledgermq.protocol.headers" for a in node.names):
            found.append(f"line {node.lineno}: imports ledgermq.protocol.headers as a module")
    return found


def _is_headers_module(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("headers", "H")


@pytest.mark.parametrize("path", PROCESSOR_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_processors_use_typed_headers_only(path: Path) -> None:
    assert not _violations(path), f"{path.relative_to(SRC)}: {_violations(path)}"


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The check itself is live: each banned form is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ledgermq.protocol.headers import field, MissingField\n"
        "import ledgermq.protocol.headers\n"
        "def f(cmd):\n"
        "    return cmd.ext_fields.get('topic'), headers.int_field(cmd, 'queueId')\n"
    )
    found = _violations(bad)
    assert len(found) == 4, found
    assert PROCESSOR_FILES and all(p.exists() for p in PROCESSOR_FILES)
