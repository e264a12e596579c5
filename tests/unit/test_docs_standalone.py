"""The user documentation stands alone: README.md and docs/*.md must not send readers to
the project's internal ../shared/ notes (design notes, the RocketMQ fact sheet, research),
which users do not have; docs/formats.md holds what they need of it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("../shared", "shared/DESIGN", "ROCKETMQ-FACTS", "shared/research")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_page_does_not_point_at_internal_notes(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if any(word in line for word in FORBIDDEN)
    ]
    assert not found, f"{page.name} points at internal notes:\n" + "\n".join(found)


def test_the_formats_page_exists_with_the_sections_tests_cite() -> None:
    text = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    for heading in ("## 1.", "### 3.2", "### 4.1", "### 4.5", "### 5.2", "### 5.3", "### 5.4", "### 5.5"):
        assert heading in text
