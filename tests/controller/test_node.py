"""Controller nodes on loopback (in-process, real sockets): leadership, requests, failover."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.controller.client import ControllerClient
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet
from ledgermq.protocol.headers_controller import (
    AlterSyncStateSetRequestHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
)

from .cluster import FakeBroker, Group, wait_until

G = "broker-a"


def test_followers_answer_not_leader_with_the_leader_and_the_client_follows(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        await group.start()
        raw = RemotingClient()
        try:
            leader = await group.leader()
            follower = next(s for s in group.services.values() if s is not leader)
            req = RemotingCommand.request(RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(G).ext())
            resp = await raw.invoke(follower.node.address, req)
            assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert resp.ext_fields["controllerLeaderAddress"] == leader.node.address
            assert leader.node.address in (resp.remark or "")
            meta = GetMetaDataResponseHeader.from_ext(
                (
                    await raw.invoke(
                        follower.node.address, RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
                    )
                ).ext_fields
            )
            assert meta.group == "group1" and not meta.is_leader
            assert meta.controller_leader_id == leader.node.config.self_id
            assert meta.peers is not None and meta.peers.count(";") == 3

            async with ControllerClient([follower.node.address]) as ctl:
                b1 = FakeBroker(group.addrs, G, 1)
                await b1.start()
                try:
                    await b1.register(ctl)
                    assert ctl.leader_addr == leader.node.address
                    _, hdr, body = await ctl.elect_master("DefaultCluster", G, 1)
                    assert hdr.master_broker_id == 1 and hdr.master_epoch == 1
                    assert body is not None and body.broker_member_group is not None
                    assert body.broker_member_group.broker_addrs == {1: b1.address}
                    info, sss = await ctl.get_replica_info(G)
                    assert info.master_address == b1.address and sss == SyncStateSet(frozenset({1}), 1)
                    # Every node applied the same entries.
                    await wait_until(
                        lambda: len({repr(s.node.state.snapshot()) for s in group.services.values()}) == 1,
                        5.0,
                        "the same state everywhere",
                    )
                finally:
                    await b1.stop()
        finally:
            await raw.close()
            await group.stop()

    asyncio.run(main())


def test_a_lost_master_is_replaced_from_the_sync_state_set_and_the_brokers_are_told(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        await group.start()
        brokers = [FakeBroker(group.addrs, G, i) for i in (1, 2, 3)]
        try:
            await group.leader()
            async with ControllerClient(group.addrs) as ctl:
                for b in brokers:
                    await b.start()
                    await b.register(ctl)
                    b.start_heartbeats()
                await ctl.elect_master("DefaultCluster", G, 1)
                leader = await group.leader()
                await wait_until(lambda: leader.node.state.groups[G].alive_ids() == {1, 2, 3}, 5.0, "all alive")
                # The master lets 2 into the SyncStateSet; 3 stays out.
                hdr = AlterSyncStateSetRequestHeader(G, 1, 1)
                cmd = RemotingCommand.request(
                    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, hdr.ext(), SyncStateSet(frozenset({1, 2}), 1).encode()
                )
                resp = await ctl.invoke(cmd)
                assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["newSyncStateSetEpoch"] == "2"
                # A stale epoch is refused.
                resp = await ctl.invoke(cmd)
                assert resp.code in (
                    ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                    ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                )

                brokers[2].max_offset = 10**9  # more data than 2, but not in the SyncStateSet
                t0 = time.monotonic()
                await brokers[0].stop_heartbeats()  # silent but connected: the heartbeat timeout decides
                await wait_until(lambda: any(h.master_broker_id == 2 for h, _ in brokers[1].notified), 5.0, "2 told")
                failover = time.monotonic() - t0
                print(f"\nheartbeat-timeout failover: {failover * 1000:.0f} ms (timeout 400 ms, scans 50 ms)")
                assert failover < 2.0
                info, sss = await ctl.get_replica_info(G)
                assert info.master_broker_id == 2 and info.master_epoch == 2 and sss.sync_state_set == {2}
                h, body = next((h, b) for h, b in brokers[2].notified if h.master_broker_id == 2)
                assert h.master_address == brokers[1].address and SyncStateSet.decode(body).sync_state_set == {2}
                assert not any(h.master_broker_id == 2 for h, _ in brokers[0].notified)  # 1 is not alive

                # Broker 2 dies with its connections closed: detected at once; 3 (alive, outside
                # the SyncStateSet) cannot be elected cleanly, so the group has no master.
                t0 = time.monotonic()
                await brokers[1].stop_heartbeats(close=True)
                leader = await group.leader()
                await wait_until(lambda: leader.node.state.groups[G].master_broker_id is None, 5.0, "master deposed")
                print(f"connection-close detection and deposal: {(time.monotonic() - t0) * 1000:.0f} ms")
                assert leader.node.state.groups[G].master_epoch == 3
        finally:
            for b in brokers:
                await b.stop()
            await group.stop()

    asyncio.run(main())


def test_the_leader_stops_and_a_new_one_answers_with_the_same_state(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        await group.start()
        try:
            async with ControllerClient(group.addrs) as ctl:
                b1 = FakeBroker(group.addrs, G, 1)
                await b1.start()
                await b1.register(ctl)
                await ctl.elect_master("DefaultCluster", G, 1)
                old = await group.leader()
                await group.stop_node(old.node.config.self_id)
                info, _ = await ctl.get_replica_info(G)  # the client finds the new leader
                assert info.master_broker_id == 1 and info.master_epoch == 1
                new = await group.leader()
                assert new is not old
                # The stopped node comes back, replays its log and catches up.
                back = await group.start_node(old.node.config.self_id)
                await wait_until(lambda: back.node.state.snapshot() == new.node.state.snapshot(), 5.0, "caught up")
                await b1.stop()
        finally:
            await group.stop()

    asyncio.run(main())
