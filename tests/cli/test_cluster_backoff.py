"""The supervisor's restart delays, without processes: 1 s doubling to the cap while a
process keeps dying, back to the first delay once it stayed up ``stable_s``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.cli.cluster.supervisor import Backoff, Member, MemberSpec, Supervisor


class FakeProc:
    """What ``_tend`` asks of a child: whether it exited, and how."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


def _supervisor(tmp_path: Path, said: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Supervisor, Member]:
    sup = Supervisor("127.0.0.1:1", tmp_path / "run", said.append, Backoff(first_s=1.0, max_s=4.0, stable_s=60.0))
    spec = MemberSpec("broker-a", "master broker-a", ("broker",), tmp_path / "broker-a.log")
    member = Member(spec, delay_s=1.0)
    starts = iter(range(100, 200))

    def fake_start(m: Member) -> None:
        m.proc = FakeProc(next(starts))  # type: ignore[assignment]
        m.ready = False
        m.restart_at = None

    monkeypatch.setattr(sup, "_start", fake_start)
    fake_start(member)
    sup.members.append(member)
    return sup, member


def _die_and_restart(sup: Supervisor, m: Member, now: float) -> float:
    """Kill the current child at ``now``, let the supervisor notice and restart it; return
    the delay it waited."""
    assert m.proc is not None
    m.started_at = m.started_at or now
    m.proc.returncode = -9  # type: ignore[misc]
    sup._tend(m, now)
    assert m.restart_at is not None
    due, restarts = m.restart_at, m.restarts
    sup._tend(m, due - 0.01)  # not yet due: nothing happens
    assert m.restart_at == due and m.restarts == restarts
    sup._tend(m, due)  # due: started again
    assert m.restart_at is None
    m.started_at = due
    return due - now


def test_delays_double_to_the_cap_and_reset_after_a_stable_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    sup, m = _supervisor(tmp_path, said, monkeypatch)
    m.started_at = 1000.0
    now = 1000.5
    delays = []
    for _ in range(5):  # dies soon after every start
        delays.append(_die_and_restart(sup, m, now))
        now = m.started_at + 0.5
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert said[0] == "master broker-a exited with -9; restarting in 1 s"
    assert said[1] == "master broker-a restarted (pid 101); log " + str(tmp_path / "broker-a.log")
    assert m.restarts == 5

    now = m.started_at + 61.0  # stayed up longer than stable_s, then died
    assert _die_and_restart(sup, m, now) == 1.0
