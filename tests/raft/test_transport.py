"""RaftTransport over real sockets: peers-string parsing, one frame per peer per Ready,
bounded queues that drop the oldest, strict inbound decoding, reconnection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from ledgermq.errors import ConfigError
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.raft.types import Entry, Message, MsgType
from ledgermq.raft.wire import encode_batch
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.testing.ports import HOST, closed_port, free_port


def test_parse_peers_accepts_dledger_form() -> None:
    assert parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-10.0.0.3:40913;") == {
        "n0": "127.0.0.1:40911",
        "n1": "127.0.0.1:40912",
        "n2": "10.0.0.3:40913",
    }
    assert parse_peers(" a-host-name:1 ") == {"a": "host-name:1"}


@pytest.mark.parametrize(
    ("peers", "named"),
    [
        ("", "part 1 ('') is empty"),
        ("n0-127.0.0.1:1;;n1-127.0.0.1:2", "part 2"),
        ("n0127.0.0.1:1", "no '-'"),
        ("n0-127.0.0.1:1;-127.0.0.1:2", "peer id ''"),
        ("n0-127.0.0.1:1;n/1-127.0.0.1:2", "peer id 'n/1'"),
        ("n0-127.0.0.1:1;n1-127.0.0.1", "address '127.0.0.1'"),
        ("n0-127.0.0.1:1;n1-127.0.0.1:70000", "address '127.0.0.1:70000'"),
        ("n0-127.0.0.1:1;n0-127.0.0.1:2", "'n0' appears twice"),
        ("n0-127.0.0.1:1;n1-127.0.0.1:1", "is also peer 'n0'"),
    ],
)
def test_parse_peers_names_the_bad_part(peers: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_peers(peers)
    assert named in str(info.value)


def hb(src: str, dst: str, term: int = 1) -> Message:
    return Message(MsgType.HEARTBEAT, src, dst, term)


async def wait_until(pred: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.005)


class Pair:
    """n0 and n1 transports, each attached to its own server; n2 is named but never up."""

    def __init__(self) -> None:
        ports = [free_port(), free_port(), closed_port()]
        self.peers = {f"n{i}": f"{HOST}:{p}" for i, p in enumerate(ports)}
        self.servers = [RemotingServer(HOST, ports[i]) for i in range(2)]
        self.transports = [RaftTransport(f"n{i}", self.peers, queue_limit=4) for i in range(2)]
        self.inbox: list[list[Message]] = [[], []]
        for i in range(2):
            self.transports[i].attach(self.servers[i])
            self.transports[i].set_handler(self.inbox[i].append)

    async def __aenter__(self) -> Pair:
        for s in self.servers:
            await s.start()
        for t in self.transports:
            await t.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for t in self.transports:
            await t.stop()
        for s in self.servers:
            await s.stop()


def test_one_ready_travels_as_one_frame_per_peer() -> None:
    async def main() -> None:
        async with Pair() as p:
            t0 = p.transports[0]
            append = Message(MsgType.APPEND, "n0", "n1", 2, log_term=1, index=1, entries=(Entry(2, 2, b"x"),))
            t0.send([hb("n0", "n1"), append, hb("n0", "n1", 3)])
            await wait_until(lambda: len(p.inbox[1]) == 1)
            assert p.inbox[1][0] == [hb("n0", "n1"), append, hb("n0", "n1", 3)]
            assert bytes(p.inbox[1][0][1].entries[0].data) == b"x"
            stats = t0.stats()["n1"]
            assert (stats.sent_frames, stats.sent_messages, stats.dropped) == (1, 3, 0)
            # And back the other way, over n1's own connection.
            p.transports[1].send([Message(MsgType.HEARTBEAT_RESP, "n1", "n0", 3)])
            await wait_until(lambda: len(p.inbox[0]) == 1)

    asyncio.run(main())


def test_a_down_peer_costs_bounded_memory_and_counts_drops() -> None:
    async def main() -> None:
        async with Pair() as p:
            t0 = p.transports[0]
            for term in range(1, 41):
                t0.send([hb("n0", "n2", term), hb("n0", "n1", term)])
            await wait_until(lambda: t0.stats()["n2"].send_errors >= 1)
            await wait_until(lambda: t0.stats()["n1"].sent_messages + t0.stats()["n1"].dropped == 40)
            s2 = t0.stats()["n2"]
            assert s2.sent_messages == 0 and s2.dropped >= 40 - 4 - 1  # queue_limit 4, one batch in flight
            # Everything n1 got arrived in order, and the newest heartbeat always survives
            # (sent is not yet received: wait for it to land in n1's inbox).
            await wait_until(lambda: any(m.term == 40 for batch in p.inbox[1] for m in batch))
            got = [m.term for batch in p.inbox[1] for m in batch]
            assert got == sorted(got) and got[-1] == 40

    asyncio.run(main())


def test_reconnects_after_the_peer_restarts() -> None:
    async def main() -> None:
        async with Pair() as p:
            t0 = p.transports[0]
            t0.send([hb("n0", "n1", 1)])
            await wait_until(lambda: len(p.inbox[1]) == 1)
            await p.servers[1].stop()
            server = RemotingServer(HOST, int(p.peers["n1"].rsplit(":", 1)[1]))
            p.transports[1].attach(server)
            await server.start()
            p.servers[1] = server
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0
            term = 2
            while len(p.inbox[1]) < 2:  # the first send may still hit the dead connection
                assert loop.time() < deadline, "no delivery after the restart"
                t0.send([hb("n0", "n1", term)])
                term += 1
                await asyncio.sleep(0.02)

    asyncio.run(main())


def test_inbound_garbage_and_strangers_are_counted_and_dropped() -> None:
    async def main() -> None:
        async with Pair() as p:
            client = RemotingClient()
            try:
                addr = p.peers["n1"]
                await client.invoke_oneway(addr, RemotingCommand.request(RequestCode.RAFT_MESSAGES, body=b"junk"))
                await wait_until(lambda: p.transports[1].decode_errors == 1)
                strangers = encode_batch([hb("x9", "n1"), hb("n0", "n2"), hb("n0", "n1", 7)])
                await client.invoke_oneway(addr, RemotingCommand.request(RequestCode.RAFT_MESSAGES, body=strangers))
                await wait_until(lambda: len(p.inbox[1]) == 1)
                assert p.inbox[1] == [[hb("n0", "n1", 7)]]
                p.transports[1].inbound_filter = lambda m: m.term != 8
                body = encode_batch([hb("n0", "n1", 8), hb("n0", "n1", 9)])
                await client.invoke_oneway(addr, RemotingCommand.request(RequestCode.RAFT_MESSAGES, body=body))
                await wait_until(lambda: len(p.inbox[1]) == 2)
                assert p.inbox[1][1] == [hb("n0", "n1", 9)]
                assert p.transports[1].stats()["n0"].filtered == 1
            finally:
                await client.close()

    asyncio.run(main())


def test_transport_refuses_a_self_id_outside_the_peers() -> None:
    with pytest.raises(ConfigError, match="not among the peers"):
        RaftTransport("n9", {"n0": "127.0.0.1:1"})
