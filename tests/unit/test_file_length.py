"""No module in src/ is longer than 600 lines. A module that grows past it holds more than one
responsibility; it is split by responsibility (what each part decides or keeps), not into
numbered chunks."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_layering import SRC

MAX_LINES = 600


def long_modules(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """``path under root: lines`` of every ``.py`` file under ``root`` longer than ``limit``."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_longer_than_600_lines() -> None:
    found = long_modules(SRC)
    assert not found, f"modules over {MAX_LINES} lines (split them by responsibility): {found}"


def test_the_check_sees_a_planted_long_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "fits.py").write_text("x = 1\n" * 600)
    (tmp_path / "pkg" / "too_long.py").write_text("x = 1\n" * 600 + "y = 2")  # the last line has no newline
    (tmp_path / "notes.txt").write_text("x\n" * 700)
    assert long_modules(tmp_path) == {"pkg/too_long.py": 601}
