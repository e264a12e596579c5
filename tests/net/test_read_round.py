"""The read round (net/read_round.py): output queued during a read, or during the broker's
end-of-turn step, leaves when the outermost of them ends, one write per connection.

On a real server and loopback socket: answers released by a callback scheduled from the
read (as the write turn's step releases SYNC_MASTER sends) are written when that callback
ends, not by a flush that would need another pass of the event loop."""

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


def test_only_the_outermost_exit_writes_each_connection_once() -> None:
    calls: list[str] = []
    rnd = ReadRound()
    rnd.enter()
    rnd.defer_flush(_Conn("a", calls))
    rnd.enter()  # a nested round (the step run from within a read)
    rnd.defer_flush(_Conn("b", calls))
    rnd.exit()
    assert calls == [] and rnd.open
    rnd.exit()
    assert calls == ["flush a", "flush b"]
    assert not rnd.open


def test_a_failing_flush_is_logged_and_the_others_still_write() -> None:
    calls: list[str] = []

    class _Broken:
        def flush(self) -> None:
            raise OSError("gone")

    rnd = ReadRound()
    rnd.enter()
    rnd.defer_flush(_Broken())
    rnd.defer_flush(_Conn("ok", calls))
    rnd.exit()
    assert calls == ["flush ok"]
    assert not rnd.open


def _frame(opaque: int) -> bytes:
    return RemotingCommand.request(300, {}, b"", opaque=opaque).encode()


def test_answers_released_in_a_round_of_a_scheduled_callback_leave_before_the_next_pass() -> None:
    """The scheduled callback stands for the broker's write turn step: it releases earlier
    requests' answers inside the server's round, and they are handed to the transport as
    it ends; a callback scheduled after it finds nothing left queued."""

    async def main() -> None:
        server = RemotingServer(HOST, 0, tls=None)
        held: list[Deferred] = []
        queued_after: list[int] = []

        def step(ctx: RequestContext) -> None:
            loop = asyncio.get_running_loop()
            server.read_round.enter()
            try:
                for deferred in held:
                    deferred.resolve(RemotingCommand(code=ResponseCode.SUCCESS, remark="released"))
                loop.call_soon(lambda: queued_after.append(len(ctx.connection._out)))
            finally:
                server.read_round.exit()

        def processor(ctx: RequestContext, cmd: RemotingCommand) -> Deferred:
            deferred = Deferred()
            held.append(deferred)
            if len(held) == 3:
                asyncio.get_running_loop().call_soon(step, ctx)
            return deferred

        server.register(300, processor)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            writer.write(b"".join(_frame(n) for n in (1, 2, 3)))
            answers = {}
            for _ in range(3):
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                answer = decode_command(await reader.readexactly(length))
                answers[answer.opaque] = answer.remark
            assert answers == {1: "released", 2: "released", 3: "released"}
            assert queued_after == [0]  # written as the round ended, not by a later flush
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
