"""ha/codec.py and ha/session.py stay pure: no networking, no event loop, no clock reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_layering import FORBIDDEN_IN_PURE, SRC, _imports


@pytest.mark.parametrize("name", ["codec.py", "session.py", "repair.py"])
def test_ha_pure_modules(name: str) -> None:
    path: Path = SRC / "ha" / name
    names = _imports(path)
    assert not {n for n in names if n.split(".")[0] in FORBIDDEN_IN_PURE | {"time", "threading"}}
    ours = {n for n in names if n.startswith("ledgermq.")}
    assert all(n.startswith(("ledgermq.errors", "ledgermq.ha.codec")) for n in ours), ours
