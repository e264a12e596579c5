"""LEDGERMQ_FAILPOINTS parsing: the old forms keep working, ``enospc-if:PATH`` follows a flag file."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.failpoints import arm_from_env, failpoint


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    before = dict(failpoints._armed)
    yield
    failpoints._armed.clear()
    failpoints._armed.update(before)


def test_raise_and_exit_forms_still_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERMQ_FAILPOINTS", "t.a=raise, t.b=exit@3 ,t.c=exit")
    arm_from_env()
    assert {"t.a", "t.b", "t.c"} <= set(failpoints._armed)
    with pytest.raises(OSError, match=r"failpoint t\.a armed"):
        failpoint("t.a")
    failpoint("t.b")  # exit on the 3rd hit only
    failpoint("t.b")


def test_unknown_action_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERMQ_FAILPOINTS", "t.a=explode")
    with pytest.raises(ValueError, match="enospc-if:PATH"):
        arm_from_env()


def test_enospc_without_a_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERMQ_FAILPOINTS", "t.a=enospc-if:")
    with pytest.raises(ValueError):
        arm_from_env()


def test_enospc_only_while_the_flag_exists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    flag = tmp_path / "odd@dir=x" / "full.flag"
    flag.parent.mkdir()
    monkeypatch.setenv("LEDGERMQ_FAILPOINTS", f"t.disk=enospc-if:{flag},t.other=raise")
    arm_from_env()
    failpoint("t.disk")  # no flag: nothing happens
    flag.touch()
    with pytest.raises(OSError) as info:
        failpoint("t.disk")
    assert info.value.errno == errno.ENOSPC
    flag.unlink()
    failpoint("t.disk")
    with pytest.raises(OSError, match=r"t\.other"):
        failpoint("t.other")
