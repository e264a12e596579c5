"""A send answered at once (no flush or slave wait) is dispatched before the broker reads
any later request: a client that got SEND_OK and then pulls or queries finds the message.

The send path queues the slave's window and the store's dispatch while it handles the
frame (net/server.py, processors/send.py); a callback queued after the answer stands for
the next request the loop could read. If the dispatch were pushed one loop turn further
(a second ``call_soon`` hop), that callback would run first and this test fails.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.net.connection import Connection
from ledgermq.net.server import RequestContext
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.broker.harness import running_broker

TOPIC = "VisibleTopic"


def _send_request(i: int) -> RemotingCommand:
    header = {
        "a": "pg",
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": 1_700_000_000_000,
        "h": 0,
        "i": P.encode_properties({"UNIQ_KEY": f"{i:032d}", "KEYS": f"key-{i}"}),
        "j": 0,
        "k": False,
        "m": False,
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, b"visible %d" % i, opaque=i)


def test_an_answered_send_is_dispatched_before_the_next_request_is_read(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path) as h:
            await h.send(TOPIC)  # creates the topic (the waiting path); the rest take the fast one
            await h.dispatched()
            store = h.app.broker.store
            processor = h.app.server.processors[RequestCode.SEND_MESSAGE_V2]
            ctx = RequestContext(Connection(), h.app.server)
            loop = asyncio.get_running_loop()
            for i in range(1, 21):
                seen: asyncio.Future[tuple[int, int]] = loop.create_future()

                def handle_frame(i: int = i, seen: asyncio.Future[tuple[int, int]] = seen) -> None:
                    answer = processor(ctx, _send_request(i))
                    assert isinstance(answer, RemotingCommand), answer  # answered within the call
                    assert answer.code == ResponseCode.SUCCESS, answer
                    offset = int(answer.ext_fields["queueOffset"])
                    # the next thing the loop could do: read a request sent after SEND_OK
                    loop.call_soon(lambda: seen.set_result((offset, store.max_offset_in_queue(TOPIC, 0))))

                loop.call_soon(handle_frame)
                offset, readable_up_to = await asyncio.wait_for(seen, 5.0)
                assert readable_up_to == offset + 1, (i, offset, readable_up_to)

    asyncio.run(main())
