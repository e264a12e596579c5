"""The driver's table of proposals still owed an answer: futures and callbacks get the same
word, each exactly once, and one callback that raises keeps no other from being told."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ledgermq.raft.types import Entry, Role
from ledgermq.raftio.proposals import LeadershipLostError, PendingProposals, ProposalOverwrittenError


def test_callbacks_and_futures_hear_the_same_outcomes() -> None:
    async def main() -> None:
        table = PendingProposals()
        heard: list[tuple[int, type[BaseException] | None]] = []

        def note(index: int, error: BaseException | None) -> None:
            heard.append((index, None if error is None else type(error)))

        fut = table.add(1, 3)
        table.add_callback(2, 3, note)
        table.add_callback(3, 3, note)
        table.add_callback(4, 2, note)  # an older term's proposal
        table.settle([Entry(1, 3), Entry(2, 3), Entry(3, 4)])  # index 3 taken by term 4's entry
        assert fut.result() == 1
        assert heard == [(2, None), (3, ProposalOverwrittenError)]
        table.leadership_changed("n0", Role.LEADER, 4, "n0")  # term 2's outcome is unknown now
        assert heard[-1] == (4, LeadershipLostError)
        table.settle([Entry(4, 2)])  # already answered: not told twice
        assert len(heard) == 3 and len(table) == 0

    asyncio.run(main())


def test_a_callback_that_raises_does_not_keep_the_others_from_hearing(caplog: pytest.LogCaptureFixture) -> None:
    table = PendingProposals()
    heard: list[int] = []

    def boom(index: int, _error: BaseException | None) -> None:
        raise RuntimeError(f"callback of {index}")

    table.add_callback(1, 1, boom)
    table.add_callback(2, 1, lambda index, _e: heard.append(index))
    with caplog.at_level(logging.ERROR):
        table.settle([Entry(1, 1), Entry(2, 1)])
    assert heard == [2]
    assert "index 1" in caplog.text
    table.add_callback(3, 1, boom)
    table.add_callback(4, 1, lambda index, _e: heard.append(index))
    table.fail(lambda i, t: LeadershipLostError("stopped", i, t))
    assert heard == [2, 4] and len(table) == 0
