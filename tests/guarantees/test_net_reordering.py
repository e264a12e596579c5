"""Guarantee 3 at the net layer: under pipelining, whatever order processing finishes in,
every answer carries its own request's opaque and the content that belongs to that request.

One raw socket carries 256 requests in one write, with opaques drawn at random (so an
answer matched by arrival order or by a counter cannot pass). Their kinds are mixed by a
seeded generator: inline processors (``register_inline``, answered where the frame is
read), async processors that finish without waiting, processors held until the test
releases them, held processors that then raise (SYSTEM_ERROR), and held oneway requests
(never answered). The held ones are released one at a time in a seeded shuffle, and each
release must produce exactly its own answer next. Through ``RemotingClient``, requests
whose caller timed out get their answers late, interleaved with live requests: the late
answers go nowhere and every live request still gets its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import RequestTimeoutError
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.guarantees.wire import HOST, Pipe, stays, until

INLINE = 2101
FAST = 2102
HELD = 2103
HELD_FAIL = 2104
N = 256


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def answer_for(cmd: RemotingCommand, how: str) -> RemotingCommand:
    """What a correct answer to ``cmd`` holds: its n, a digest and the reversed body."""
    n = cmd.ext_fields["n"]
    return cmd.response(0, f"{how}-{n}", {"n": n, "digest": digest(cmd.body)}, body=cmd.body[::-1])


class Gates:
    """One event per held request (by n); records the order processors start and finish."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.finished: list[str] = []

    def event(self, n: str) -> asyncio.Event:
        return self.events.setdefault(n, asyncio.Event())

    async def held(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        n = cmd.ext_fields["n"]
        self.started.append(n)
        await self.event(n).wait()
        self.finished.append(n)
        return answer_for(cmd, "held")

    async def held_fail(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        n = cmd.ext_fields["n"]
        self.started.append(n)
        await self.event(n).wait()
        self.finished.append(n)
        raise ValueError(f"boom-{n}")


async def fast(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return answer_for(cmd, "fast")


def inline(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return answer_for(cmd, "inline")


@asynccontextmanager
async def server_with(gates: Gates) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(HOST, 0, max_inflight_per_connection=N + 1)
    server.register_inline(INLINE, inline)
    server.register(FAST, fast)
    server.register(HELD, gates.held)
    server.register(HELD_FAIL, gates.held_fail)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def make_requests(rng: random.Random) -> list[tuple[str, RemotingCommand]]:
    """N requests of seeded kinds, random distinct opaques and bodies: (kind, request)."""
    opaques = rng.sample(range(1, 2**31 - 1), N)
    kinds = ["inline", "fast", "held", "held_fail", "held_oneway"]
    weights = [3, 3, 6, 1, 1]
    codes = {"inline": INLINE, "fast": FAST, "held": HELD, "held_fail": HELD_FAIL, "held_oneway": HELD}
    out = []
    for n in range(N):
        kind = rng.choices(kinds, weights)[0]
        body = f"req-{n}-".encode() + rng.randbytes(rng.randrange(0, 200))
        cmd = RemotingCommand.request(codes[kind], {"n": n}, body, oneway=kind == "held_oneway", opaque=opaques[n])
        out.append((kind, cmd))
    return out


def check_answer(kind: str, request: RemotingCommand, response: RemotingCommand) -> None:
    n = request.ext_fields["n"]
    assert response.opaque == request.opaque
    if kind == "held_fail":
        assert response.code == ResponseCode.SYSTEM_ERROR, (n, response)
        assert response.remark is not None and f"boom-{n}" in response.remark, (n, response.remark)
        return
    assert response.code == 0, (n, response)
    assert response.remark == f"{'held' if kind == 'held' else kind}-{n}", (n, response.remark)
    assert response.ext_fields["n"] == n
    assert response.ext_fields["digest"] == digest(request.body)
    assert response.body == request.body[::-1]


@pytest.mark.parametrize("seed", [12, 2026])
def test_answers_match_requests_when_processing_finishes_in_a_shuffled_order(seed: int) -> None:
    rng = random.Random(seed)
    requests = make_requests(rng)
    kind_of = {cmd.opaque: kind for kind, cmd in requests}
    held = [cmd for kind, cmd in requests if kind.startswith("held")]
    at_once = [cmd for kind, cmd in requests if kind in ("inline", "fast")]
    assert len(held) > 100 and len(at_once) > 50  # the seeds give a real mix

    async def main() -> None:
        gates = Gates()
        async with server_with(gates) as server:
            pipe = await Pipe.open(server.port)
            try:
                pipe.write(cmd for _, cmd in requests)  # all 256 in one write
                await until(
                    lambda: len(pipe.answers) == len(at_once) and len(gates.started) == len(held),
                    10,
                    lambda: f"{len(pipe.answers)} answers, {len(gates.started)} held processors started",
                )
                # Everything that needed no waiting is answered; nothing held is.
                assert set(pipe.answers) == {cmd.opaque for cmd in at_once}
                pipe.check_clean()

                order = held[:]
                rng.shuffle(order)
                for cmd in order:
                    before = len(pipe.answers)
                    gates.event(cmd.ext_fields["n"]).set()
                    if cmd.is_oneway:
                        await until(lambda c=cmd: c.ext_fields["n"] in gates.finished, 5, "the oneway processor")
                        continue
                    await until(lambda c=cmd: c.opaque in pipe.answers, 5, lambda c=cmd: f"the answer to {c}")
                    # exactly one new answer, and it is the released request's
                    assert len(pipe.answers) == before + 1
                    assert pipe.answers[cmd.opaque].seq == max(a.seq for a in pipe.answers.values())
                answered = len(requests) - sum(1 for cmd in held if cmd.is_oneway)
                await stays(lambda: len(pipe.answers) == answered and not pipe.problems, 0.1, lambda: pipe.problems)
                for opaque, answer in pipe.answers.items():
                    check_answer(kind_of[opaque], pipe.sent[opaque], answer.response)
                # The answers really came out of request order.
                arrival = sorted(pipe.answers, key=lambda o: pipe.answers[o].seq)
                sent_order = [cmd.opaque for _, cmd in requests if cmd.opaque in pipe.answers]
                assert arrival != sent_order
            finally:
                await pipe.close()

    asyncio.run(main())


def test_late_answers_to_timed_out_requests_never_reach_other_requests() -> None:
    """The client gives up on some requests; their answers come later, interleaved with
    the answers of requests still waiting on the same connection. Each waiting request
    gets its own answer; the late ones are dropped."""
    rng = random.Random(77)

    async def main() -> None:
        gates = Gates()
        async with server_with(gates) as server:
            client = RemotingClient()
            addr = f"{HOST}:{server.port}"
            calls: list[asyncio.Task[RemotingCommand]] = []
            fresh: list[tuple[RemotingCommand, asyncio.Task[RemotingCommand]]] = []
            try:
                requests = [
                    RemotingCommand.request(HELD, {"n": n}, f"c-{n}-".encode() + rng.randbytes(rng.randrange(50)))
                    for n in range(128)
                ]
                short = set(rng.sample(range(128), 48))
                calls += [
                    asyncio.create_task(client.invoke(addr, cmd, 0.2 if n in short else 30.0))
                    for n, cmd in enumerate(requests)
                ]
                await until(lambda: len(gates.started) == 128, 10, "every processor to start")
                for n in short:  # wait for the short ones to give up
                    with pytest.raises(RequestTimeoutError):
                        await calls[n]
                # Interleave fresh requests, answered at once, with late and live answers.
                order = list(range(128))
                rng.shuffle(order)
                for i, n in enumerate(order):
                    gates.event(str(n)).set()
                    if i % 8 == 0:
                        cmd = RemotingCommand.request(FAST, {"n": f"f{i}"}, rng.randbytes(30))
                        fresh.append((cmd, asyncio.create_task(client.invoke(addr, cmd, 30.0))))
                    await asyncio.sleep(0)
                live = [calls[n] for n in range(128) if n not in short] + [task for _, task in fresh]
                _, unanswered = await asyncio.wait(live, timeout=10)
                assert not unanswered, f"{len(unanswered)} of {len(live)} live requests never got their answer"
                for n, cmd in enumerate(requests):
                    if n not in short:
                        check_answer("held", cmd, calls[n].result())
                for cmd, task in fresh:
                    check_answer("fast", cmd, task.result())
                await until(lambda: len(gates.finished) == 128, 5, "every processor to finish")
                conn = await client.connection(addr)
                assert conn.pending == {}
                assert len(server.connections) == 1  # all of it over one connection
            finally:
                for task in [*calls, *(t for _, t in fresh)]:
                    task.cancel()
                await asyncio.gather(*calls, *(t for _, t in fresh), return_exceptions=True)
                await client.close()

    asyncio.run(main())
