"""A broker that answers sends at once and stores nothing: the baseline for ``bench produce``.

It registers with the name server like a broker (one topic, auto-create via TBW102) so a
real client routes to it, and answers SEND_MESSAGE(_V2) with SUCCESS. Usage:
python -m ledgermq.bench.stub_broker NAMESRV PORT
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import zlib

from ledgermq.aio.loops import new_event_loop
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig


async def serve(namesrv: str, port: int) -> None:
    server = RemotingServer("127.0.0.1", port, name="stub-broker")
    counter = itertools.count()

    async def send(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        n = next(counter)
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields={"msgId": offset_msg_id(("127.0.0.1", port), n), "queueId": 0, "queueOffset": n},
        )

    async def ok(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        server.register(code, send)
    for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
        server.register(code, ok)
    await server.start()
    topics = {t: TopicConfig(t, 8, 8, 7 if t == "TBW102" else 6) for t in ("TBW102", "BenchTopic")}
    body = RegisterBrokerBody(DataVersion(1, 1), topics).encode()
    client = RemotingClient()
    while True:
        cmd = RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerAddr": f"127.0.0.1:{port}",
                "brokerId": 0,
                "brokerName": "stub-broker",
                "clusterName": "DefaultCluster",
                "haServerAddr": f"127.0.0.1:{port + 1}",
                "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
            },
            body,
        )
        try:
            await client.invoke(namesrv, cmd, 3.0)
        except Exception as exc:  # the name server may not be up yet
            print(f"stub broker: registration failed: {exc}", file=sys.stderr)
        await asyncio.sleep(10)


def main() -> None:
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(sys.argv[1], int(sys.argv[2])))
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()


if __name__ == "__main__":
    main()
