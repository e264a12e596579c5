"""Prometheus metrics over HTTP: a master and its slave export store and HA figures."""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledgermq import failpoints
from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.ha.config import HAConfig
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.testing.ports import free_port


def _no_space() -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _broker(root: Path, namesrv: str, broker_id: int, role: BrokerRole, metrics_port: int | None) -> BrokerApp:
    extra = {} if metrics_port is None else {"metrics_port": metrics_port}
    cfg = BrokerConfig(
        broker_name="broker-a",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        listen_host="127.0.0.1",
        listen_port=free_port(),
        ha_listen_port=free_port(),
        namesrv_addr=namesrv,
        register_name_server_period_ms=10_000,
        **extra,  # type: ignore[arg-type]
    )
    store_cfg = StoreConfig(root_dir=str(root), broker_role=role, mapped_file_size_commitlog=256 * 1024)
    return BrokerApp(cfg, store_cfg, ha_config=HAConfig(send_heartbeat_interval_ms=500))


async def _send(client: RemotingClient, broker: BrokerApp, i: int) -> RemotingCommand:
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "pg", "b": "MetricsTopic", "c": "TBW102", "d": 4, "e": i % 4, "f": 0, "g": int(time.time() * 1000),
         "h": 0, "i": "WAIT\x01true"},
        f"message {i}".encode(),
    )  # fmt: skip
    return await client.invoke(broker.config.broker_addr, cmd, 10.0)


async def _until(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)  # the server closes after one answer (Connection: close)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body.decode()


async def _scrape(port: int) -> Samples:
    status, headers, body = await _get(port, "/metrics")
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _one(samples: Samples, name: str, **labels: str) -> float:
    found = [v for lbl, v in samples.get(name, []) if all(lbl.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {samples.get(name)}"
    return found[0]


def test_master_and_slave_export_store_and_ha_metrics(tmp_path: Path) -> None:
    async def run() -> None:
        ns = NamesrvApp(NamesrvConfig(listen_host="127.0.0.1", listen_port=0, kv_config_path=""))
        await ns.start()
        namesrv = f"127.0.0.1:{ns.port}"
        m_port, s_port = free_port(), free_port()
        master = _broker(tmp_path / "m", namesrv, 0, BrokerRole.ASYNC_MASTER, m_port)
        slave = _broker(tmp_path / "s", namesrv, 1, BrokerRole.SLAVE, s_port)
        client = RemotingClient()
        try:
            await master.start()
            await slave.start()
            assert master.metrics.port == m_port and slave.metrics.port == s_port
            for i in range(20):
                assert (await _send(client, master, i)).code == ResponseCode.SUCCESS
            m_store, s_store = master.broker.store, slave.broker.store
            ha = master.broker.ha
            assert ha is not None
            await _until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "the slave to catch up")
            await _until(
                lambda: [s.acked_offset for s in ha.status()] == [m_store.max_phy_offset], 20, "the slave's ack"
            )
            assert s_store.wait_dispatched(timeout=10)
            await _until(lambda: m_store.dispatch_behind_bytes == 0, 10, "the master's dispatch")

            m = await _scrape(m_port)
            max_offset = m_store.max_phy_offset
            assert max_offset > 0
            assert _one(m, "ledgermq_commitlog_max_offset", broker="broker-a") == max_offset
            assert _one(m, "ledgermq_commitlog_min_offset", broker="broker-a") == 0
            assert _one(m, "ledgermq_store_dispatch_behind_bytes") == 0
            assert _one(m, "ledgermq_store_dispatch_failing") == 0
            assert _one(m, "ledgermq_store_dispatch_failures_total") == 0
            assert _one(m, "ledgermq_store_corruptions_found_total") == 0
            assert _one(m, "ledgermq_store_damaged_bytes") == 0
            assert _one(m, "ledgermq_store_consume_queues") == len(m_store.queues.queues) >= 4
            assert 0 < _one(m, "ledgermq_store_consume_queue_open_files") <= 1024
            failpoints.arm("consume_queue.before_put", _no_space)
            try:
                await _send(client, master, 99)  # stored; its dispatch fails
                await _until(lambda: m_store.dispatch_problem is not None, 10, "the dispatch failure")
                refused = await _send(client, master, 100)
                assert refused.code != ResponseCode.SUCCESS and "readable" in (refused.remark or "")
                failing = await _scrape(m_port)
                assert _one(failing, "ledgermq_store_dispatch_failing") == 1
                assert _one(failing, "ledgermq_store_dispatch_failures_total") >= 1
            finally:
                failpoints.disarm("consume_queue.before_put")
            await _until(lambda: m_store.dispatch_problem is None, 10, "the dispatch to recover")
            assert _one(await _scrape(m_port), "ledgermq_store_dispatch_failing") == 0
            await _until(lambda: m_store.dispatch_behind_bytes == 0, 10, "the master's dispatch")
            max_offset = m_store.max_phy_offset
            await _until(lambda: s_store.max_phy_offset == max_offset, 20, "the slave to catch up again")
            await _until(lambda: [s.acked_offset for s in ha.status()] == [max_offset], 20, "the slave's ack")
            m = await _scrape(m_port)
            (slave_addr,) = [lbl["slave"] for lbl, _ in m["ledgermq_ha_slave_connected"]]
            assert _one(m, "ledgermq_ha_slave_connected", broker="broker-a", slave=slave_addr) == 1
            assert _one(m, "ledgermq_ha_slave_in_sync", slave=slave_addr) == 1
            assert _one(m, "ledgermq_ha_slave_acked_offset", slave=slave_addr) == max_offset
            assert _one(m, "ledgermq_ha_slave_lag_bytes", slave=slave_addr) == 0
            assert _one(m, "ledgermq_ha_slave_lag_seconds", slave=slave_addr) == 0
            assert _one(m, "ledgermq_ha_in_sync_slaves") == 1
            assert _one(m, "ledgermq_ha_refused_connections_total") == 0
            assert "ledgermq_ha_client_connected" not in m

            s = await _scrape(s_port)
            assert _one(s, "ledgermq_commitlog_max_offset", broker="broker-a") == max_offset
            assert _one(s, "ledgermq_commitlog_min_offset") == 0
            assert _one(s, "ledgermq_store_dispatch_behind_bytes") == 0
            assert _one(s, "ledgermq_ha_client_connected", master=master.config.ha_server_addr) == 1
            assert _one(s, "ledgermq_ha_client_connects_total") >= 1
            assert _one(s, "ledgermq_ha_client_errors") == 0
            assert _one(s, "ledgermq_ha_client_diverged") == 0
            assert "ledgermq_ha_slave_connected" not in s

            # A peer reporting an offset beyond the master's max is refused, and counted.
            r, w = await asyncio.open_connection("127.0.0.1", ha.port)
            w.write(struct.pack(">q", max_offset + 1_000_000))
            await w.drain()
            assert await asyncio.wait_for(r.read(), 5) == b""  # the master hangs up
            w.close()
            await _until(lambda: any(not st.connected for st in ha.status()), 5, "the stranger's disconnection")
            m = await _scrape(m_port)
            assert _one(m, "ledgermq_ha_refused_connections_total") == 1
            assert _one(m, "ledgermq_ha_slave_connected", slave=slave_addr) == 1
            assert sorted(v for _, v in m["ledgermq_ha_slave_connected"]) == [0, 1]
            m = await _scrape(m_port)  # counted once, not once per scrape
            assert _one(m, "ledgermq_ha_refused_connections_total") == 1

            status, _, _ = await _get(m_port, "/other")
            assert status == 404
            status, _, _ = await _get(s_port, "/")
            assert status == 404
            status, _, _ = await _get(m_port, "/metrics", method="POST")
            assert status == 405
        finally:
            await client.close()
            await slave.stop()
            await master.stop()
            await ns.stop()
        assert not master.metrics.serving
        try:  # stopped: nothing listens on the metrics port any more
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", m_port), 2)
        except OSError:
            pass
        else:
            w.close()
            raise AssertionError("the metrics port is still open after stop()")

    asyncio.run(run())


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    assert BrokerConfig().metrics_port == 0

    async def run() -> None:
        broker = _broker(tmp_path / "m", "", 0, BrokerRole.ASYNC_MASTER, None)
        try:
            await broker.start()
            assert broker.config.metrics_port == 0
            assert not broker.metrics.serving and broker.metrics.port == 0
            # The registry still works in-process (and is the broker's own, not the global one).
            text = broker.metrics.render().decode()
            assert "ledgermq_commitlog_max_offset" in text
            assert "python_gc_objects_collected_total" not in text
        finally:
            await broker.stop()

    asyncio.run(run())


def test_stopping_with_a_silent_scrape_connection_open_ends_its_handler_quietly(tmp_path: Path) -> None:
    """A scraper that connected but sent nothing yet is cut off when the broker stops, and
    the stop ends quietly: no handler left running, no "Exception in callback" (the
    background-error fixture fails this test otherwise), the port closed."""

    async def run() -> None:
        port = free_port()
        broker = _broker(tmp_path / "m", "", 0, BrokerRole.ASYNC_MASTER, port)
        await broker.start()
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        finally:
            await asyncio.wait_for(broker.stop(), 10)
        assert not broker.metrics.serving
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        writer.close()

    asyncio.run(run())
