"""No function in src/ is longer than 80 lines, from its ``def`` to its last line (docstring
included; decorators not: a click command's option declarations are not logic). A nested
function counts inside its parent as well as on its own. A longer function is split into
named pieces, each making one decision."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_layering import SRC

MAX_LINES = 80


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function longer than ``limit`` lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > limit:
                    found.append((name, length))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for name, length in long_functions(path.read_text()):
            found.setdefault(str(path.relative_to(SRC)), []).append((name, length))
    assert not found, f"functions over {MAX_LINES} lines (split them into named pieces): {found}"


def _function(name: str, lines: int, indent: str = "", prefix: str = "def") -> str:
    """A function of exactly ``lines`` lines."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}{prefix} {name}():\n{body}"


def test_the_check_sees_a_planted_long_function(tmp_path: Path) -> None:
    planted = tmp_path / "long.py"
    planted.write_text(
        _function("fits", 80)
        + "class C:\n    @staticmethod\n"
        + _function("too_long", 81, "    ")
        + "async def outer():\n"
        + _function("inner", 81, "    ", "async def")
        + _function("fits_too", 80)
    )
    assert long_functions(planted.read_text()) == [("C.too_long", 81), ("outer", 82), ("outer.inner", 81)]
