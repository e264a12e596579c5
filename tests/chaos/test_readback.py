"""The chaos read-back against brokers that cannot serve everything for a moment: a pull
refused with SYSTEM_BUSY (a DLedger member re-recovering its log) is made again at the
same offset instead of being taken for the end of the queue, and a broker whose read held
less than another's is read again once the group is stable. Both made a DLedger member
that was being repaired look as if it had lost what it held (issue #23)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ledgermq.chaos import runner
from ledgermq.chaos.readback import ReadBack, read_broker
from ledgermq.chaos.workload import TOPIC, body_for
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol import message as M
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

HOST = "127.0.0.1"
BUSY_TIMES = 3
RECORDS = 5


def _record(queue_offset: int) -> bytes:
    return M.encode_record(topic=TOPIC, body=body_for(queue_offset, 0, 64), queue_offset=queue_offset)


def _busy_then_serving() -> tuple[RemotingServer, list[int]]:
    """A broker whose first BUSY_TIMES pulls are refused, then serves RECORDS messages."""
    pulls: list[int] = []

    async def pull(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        offset = int(cmd.ext_fields["queueOffset"])
        pulls.append(offset)
        ext = {"nextBeginOffset": offset, "minOffset": 0, "maxOffset": RECORDS, "suggestWhichBrokerId": 0}
        if len(pulls) <= BUSY_TIMES:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "re-recovering its DLedger log; ask again shortly", ext)
        if offset >= RECORDS:
            return cmd.response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", ext)
        body = b"".join(_record(k) for k in range(offset, RECORDS))
        return cmd.response(ResponseCode.SUCCESS, None, {**ext, "nextBeginOffset": RECORDS}, body)

    server = RemotingServer(HOST, 0)
    server.register(RequestCode.PULL_MESSAGE, pull)
    return server, pulls


def test_a_busy_answer_is_pulled_again_not_taken_for_the_end_of_the_queue() -> None:
    async def run() -> None:
        server, pulls = _busy_then_serving()
        await server.start()
        try:
            back = await read_broker("n0", f"{HOST}:{server.port}", TOPIC, 1, timeout=20)
        finally:
            await server.stop()
        assert not back.errors, back.errors
        assert back.busy_answers == BUSY_TIMES and pulls[: BUSY_TIMES + 1] == [0] * (BUSY_TIMES + 1)
        assert sorted(back.queues[0]) == list(range(RECORDS))
        assert [back.queues[0][k] for k in range(RECORDS)] == [(k, 0) for k in range(RECORDS)]

    asyncio.run(run())


class _Layout:
    """What ``_read_short_ones_again`` asks of a layout."""

    client_tls = None

    def __init__(self) -> None:
        self.stable_waits = 0

    def targets(self) -> list[str]:
        return ["n0", "n1", "n2"]

    def node(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(addr=f"{HOST}:{10 + int(name[1])}")

    async def wait_stable(self, timeout: float) -> None:
        self.stable_waits += 1


def _held(source: str, count: int) -> ReadBack:
    back = ReadBack(source)
    back.queues[0] = {k: (k, 0) for k in range(count)}
    return back


def test_a_broker_read_short_is_read_again_once_the_group_is_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    """n0 was found damaged while it was read (its repair refilled what the read met): it is
    read again after the group is stable again, and a note says so; the others are not."""
    again: list[str] = []

    async def read_again(source: str, addr: str, topic: str, queues: int, **_kw: object) -> ReadBack:
        again.append(source)
        return _held(source, 10)

    monkeypatch.setattr(runner, "read_broker", read_again)
    layout = _Layout()
    reads, notes = [_held("n0", 4), _held("n1", 10), _held("n2", 10)], []
    asyncio.run(runner._read_short_ones_again(layout, reads, 5.0, notes))  # type: ignore[arg-type]
    assert again == ["n0"] and layout.stable_waits == 1
    assert [r.count() for r in reads] == [10, 10, 10]
    assert notes == ["n0 was read again: its first read held 4 of 10 records (0 busy answers), the second 10"]
