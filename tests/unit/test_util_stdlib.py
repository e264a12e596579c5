"""util/ is the bottom of the house: it imports the standard library and itself, nothing else
(not even ledgermq's core modules, which may import util/). Every import counts, wherever it
stands in the file."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.unit.test_layering import SRC


def non_stdlib_imports(source: str, own_package: str = "ledgermq.util") -> list[str]:
    """``line: module`` for each import of something neither stdlib nor ``own_package``
    (relative imports stay inside the package)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            own = module == own_package or module.startswith(own_package + ".")
            if not own and module.split(".")[0] not in sys.stdlib_module_names:
                found.append(f"{node.lineno}: {module}")
    return found


def test_util_imports_only_the_standard_library() -> None:
    files = sorted((SRC / "util").rglob("*.py"))
    assert files
    bad = {p.name: v for p in files if (v := non_stdlib_imports(p.read_text()))}
    assert not bad, f"util/ must stay stdlib-only (pass collaborators in, or move the module up): {bad}"


def test_the_check_sees_planted_imports(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text(
        "import os, threading\nfrom collections.abc import Callable\nfrom ledgermq.util.ip import pack_ip\n"
        "from . import javahash\nfrom ledgermq.failpoints import failpoint\n"
        "def f():\n    import orjson\n    from ledgermq import clock\n"
    )
    assert non_stdlib_imports(planted.read_text()) == ["5: ledgermq.failpoints", "7: orjson", "8: ledgermq"]
