"""The read round (net/read_round.py): what one read answers leaves at its end, then the
end-of-read hook runs and what it answers leaves too, with no extra pass of the loop.

On a real server and loopback socket: a request answered later from a callback that runs
inside a read (the way a slave's acknowledgement releases a SYNC_MASTER send) is written
when that read ends, before the loop runs anything scheduled with ``call_soon``."""

from __future__ import annotations

import asyncio
import struct

from ledgermq.net.read_round import ReadRound
from ledgermq.net.server import Deferred, RemotingServer, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand, decode_command

HOST = "127.0.0.1"


class _Conn:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def flush(self) -> None:
        self.calls.append(f"flush {self.name}")


def test_the_outermost_exit_writes_then_runs_the_hook_then_writes_its_answers() -> None:
    calls: list[str] = []
    rnd = ReadRound()
    a, b = _Conn("a", calls), _Conn("b", calls)

    def hook() -> None:
        calls.append("hook")
        assert rnd.open  # what the hook answers is queued, not written one by one
        rnd.defer_flush(b)

    rnd.on_end = hook
    rnd.enter()
    rnd.defer_flush(a)
    rnd.enter()  # a nested read (the step's own round) ends without the hook
    rnd.exit()
    assert calls == []
    rnd.exit()
    assert calls == ["flush a", "hook", "flush b"]
    assert not rnd.open


def test_a_failing_hook_is_logged_and_the_round_still_writes_and_closes() -> None:
    calls: list[str] = []
    rnd = ReadRound()

    def hook() -> None:
        rnd.defer_flush(_Conn("late", calls))
        raise RuntimeError("boom")

    rnd.on_end = hook
    rnd.enter()
    rnd.exit()
    assert calls == ["flush late"]
    assert not rnd.open


def _frame(opaque: int) -> bytes:
    return RemotingCommand.request(300, {}, b"", opaque=opaque).encode()


def test_an_answer_released_by_the_end_of_read_hook_is_written_before_call_soon_work() -> None:
    """The hook stands for the broker's write turn: it releases an earlier request's answer
    (as a slave's ack releases a SYNC_MASTER send), and that answer is handed to the
    transport when the read ends, not by a flush scheduled for a later loop pass."""

    async def main() -> None:
        server = RemotingServer(HOST, 0, tls=None)
        held: list[Deferred] = []
        queued_when_call_soon_ran: list[int] = []

        def processor(ctx: RequestContext, cmd: RemotingCommand) -> Deferred | RemotingCommand:
            if cmd.opaque == 1:
                deferred = Deferred()
                held.append(deferred)
                return deferred
            loop = asyncio.get_running_loop()
            loop.call_soon(lambda: queued_when_call_soon_ran.append(len(ctx.connection._out)))
            return cmd.response(ResponseCode.SUCCESS, "now")

        def end_of_read() -> None:
            while len(held) > 0 and server.connections:
                held.pop().resolve(RemotingCommand(code=ResponseCode.SUCCESS, remark="released"))

        server.register(300, processor)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            writer.write(_frame(1))
            await writer.drain()
            while not held:
                await asyncio.sleep(0.001)
            server.read_round.on_end = end_of_read
            writer.write(_frame(2))
            answers = {}
            for _ in range(2):
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                answer = decode_command(await reader.readexactly(length))
                answers[answer.opaque] = answer.remark
            assert answers == {1: "released", 2: "now"}
            assert queued_when_call_soon_ran == [0]  # nothing was left for a later flush
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
