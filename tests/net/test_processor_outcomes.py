"""What a processor may return (net/server.py): an answer, None, a ``Deferred`` or an
awaitable (an ``asyncio.Future``, a coroutine); each is answered once, in the request's
opaque, and the in-flight counters come back to zero. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

from ledgermq.net.server import Deferred, RemotingServer, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.net.test_server_client import addr, remoting_client, serving, wait_until

NOW = 1101
DEFERRED = 1102
FUTURE = 1103
FUTURE_FAILS = 1104
COROUTINE = 1105


def test_every_kind_of_outcome_is_answered_once_and_released() -> None:
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0)
        deferred: list[tuple[Deferred, RemotingCommand]] = []
        futures: list[tuple[asyncio.Future[RemotingCommand | None], RemotingCommand]] = []

        def now(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(ResponseCode.SUCCESS, f"now {cmd.ext_fields['n']}")

        def later(ctx: RequestContext, cmd: RemotingCommand) -> Deferred:
            d = Deferred()
            deferred.append((d, cmd))
            return d

        def future(ctx: RequestContext, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand | None]:
            fut: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()
            futures.append((fut, cmd))
            return fut

        async def coroutine(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await asyncio.sleep(0)
            return cmd.response(ResponseCode.SUCCESS, f"coroutine {cmd.ext_fields['n']}")

        server.register(NOW, now)
        server.register(DEFERRED, later)
        server.register(FUTURE, future)
        server.register(FUTURE_FAILS, future)
        server.register(COROUTINE, coroutine)
        async with serving(server), remoting_client() as client:
            calls = {
                code: asyncio.create_task(client.invoke(addr(server), RemotingCommand.request(code, {"n": code}), 5.0))
                for code in (NOW, DEFERRED, FUTURE, FUTURE_FAILS, COROUTINE)
            }
            await wait_until(lambda: len(deferred) == 1 and len(futures) == 2, what="the held requests")
            assert server.inflight == 3  # the deferred and the two futures are still held
            d, d_cmd = deferred[0]
            d.resolve(d_cmd.response(ResponseCode.SUCCESS, "deferred"))
            d.resolve(d_cmd.response(ResponseCode.SYSTEM_ERROR, "twice"))  # ignored: answered once
            for fut, f_cmd in futures:
                if f_cmd.code == FUTURE:
                    fut.set_result(f_cmd.response(ResponseCode.SUCCESS, "future"))
                else:
                    fut.set_exception(RuntimeError("broken"))
            answers = {code: await asyncio.wait_for(task, 5.0) for code, task in calls.items()}
            assert answers[NOW].remark == f"now {NOW}"
            assert answers[DEFERRED].remark == "deferred"
            assert answers[FUTURE].remark == "future"
            assert answers[FUTURE_FAILS].code == ResponseCode.SYSTEM_ERROR
            assert answers[FUTURE_FAILS].remark == "RuntimeError: broken"
            assert answers[COROUTINE].remark == f"coroutine {COROUTINE}"
            await wait_until(lambda: server.inflight == 0, what="in-flight count back to zero")

    asyncio.run(main())


def test_a_deferred_resolved_before_anyone_listens_still_answers() -> None:
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0)

        def already(ctx: RequestContext, cmd: RemotingCommand) -> Deferred:
            d = Deferred()
            d.resolve(cmd.response(ResponseCode.SUCCESS, "already"))
            return d

        server.register(DEFERRED, already)
        async with serving(server), remoting_client() as client:
            answer = await client.invoke(addr(server), RemotingCommand.request(DEFERRED, {}), 5.0)
            assert answer.remark == "already"
            assert await deferred_wait_answer() == "waited"

    async def deferred_wait_answer() -> str | None:
        d = Deferred()
        asyncio.get_running_loop().call_soon(d.resolve, RemotingCommand(code=0, remark="waited"))
        answer = await d.wait()
        return None if answer is None else answer.remark

    asyncio.run(main())


def test_a_deferred_tells_its_observer_then_the_server_then_its_listeners_once() -> None:
    """The observer (the broker's latency count) and the server's answer sit in slots of
    their own; both are told once, in that order, also when the observer fails, and also
    when the Deferred was resolved before they were attached."""
    told: list[tuple[object, ...]] = []
    server = RemotingServer("127.0.0.1", 0)
    server._done = lambda conn, request, answer: told.append(("server", conn, request, answer))  # type: ignore[method-assign]
    request = RemotingCommand.request(DEFERRED, {})
    answer = RemotingCommand(code=ResponseCode.SUCCESS, remark="later")

    d = Deferred()
    d.observe(lambda code, status, started: told.append(("observer", code, status, started)), DEFERRED, 7.5)
    d._answer_through(server, "conn", request)  # type: ignore[arg-type]
    d.add_listener(lambda a: told.append(("listener", a)))
    assert told == []
    d.resolve(answer)
    d.resolve(RemotingCommand(code=ResponseCode.SYSTEM_ERROR))  # ignored: answered once
    assert told == [
        ("observer", DEFERRED, ResponseCode.SUCCESS, 7.5),
        ("server", "conn", request, answer),
        ("listener", answer),
    ]

    told.clear()
    failing = Deferred()

    def broken(code: int, status: int, started: float) -> None:
        raise RuntimeError("observer broke")

    failing.observe(broken, DEFERRED, 0.0)
    failing._answer_through(server, "conn", request)  # type: ignore[arg-type]
    failing.resolve(None)
    assert told == [("server", "conn", request, None)]  # answered (nothing to send) all the same

    told.clear()
    done = Deferred()
    done.resolve(answer)
    done.observe(lambda code, status, started: told.append(("observer", code, status, started)), DEFERRED, 1.0)
    done._answer_through(server, "conn", request)  # type: ignore[arg-type]
    assert told == [("observer", DEFERRED, ResponseCode.SUCCESS, 1.0), ("server", "conn", request, answer)]
