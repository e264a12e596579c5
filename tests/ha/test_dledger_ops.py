"""Operating a DLedger group: ``admin dledgerStatus``, ``admin transferLeader`` and the
``ledgermq_dledger_*`` metrics against a name server and a 3-broker group as real processes
(tests/ha/dledger_group.py), started once for the module; and the refusal of a broker that
is not in DLedger mode (in process). Every wait polls with a deadline; every process is
killed by pid at the end.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminResponseError, DLedgerStatus
from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.cli.main import cli
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.config import StoreConfig
from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, wait_until
from tests.ha.dledger_group import GROUP, TOPIC, DLedgerGroup


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DLedgerGroup]:
    g = DLedgerGroup(tmp_path_factory.mktemp("dl-ops"), metrics=True)
    try:
        g.start()
        yield g
    finally:
        g.close()


def statuses(group: DLedgerGroup) -> dict[str, DLedgerStatus]:
    async def ask() -> dict[str, DLedgerStatus]:
        async with AdminClient(group.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
            return {n: await admin.dledger_status(group.addr(n)) for n in group.ids}

    return asyncio.run(ask())


def send(group: DLedgerGroup, count: int, prefix: str) -> list[SendStatus]:
    async def run() -> list[SendStatus]:
        producer = Producer(f"dl-ops-{prefix}", group.namesrv_addr, send_timeout=3.0)
        await producer.start()
        try:
            return [(await producer.send(Message(TOPIC, f"{prefix}-{i}".encode()))).status for i in range(count)]
        finally:
            await producer.shutdown()

    return asyncio.run(run())


def caught_up(group: DLedgerGroup) -> bool:
    st = statuses(group)
    leaders = [s for s in st.values() if s.is_leader]
    return (
        len(leaders) == 1
        and len({s.term for s in st.values()}) == 1
        and all(m.lag == 0 for m in leaders[0].members)
        and len({s.commit_index for s in st.values()}) == 1
    )


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The ledgermq_dledger_* samples, keyed without the cluster and broker_id labels
    (every metric carries them; broker_id follows the Raft role)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
        text = resp.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert all({"cluster", "broker", "broker_id"} <= s.labels.keys() for s in samples)
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("cluster", "broker_id")))): s.value
        for s in samples
        if s.name.startswith("ledgermq_dledger_")
    }


def test_dledger_status_shows_one_leader_one_term_and_no_lag_after_catch_up(group: DLedgerGroup) -> None:
    assert send(group, 20, "status") == [SendStatus.SEND_OK] * 20
    wait_until("every member caught up", lambda: caught_up(group), 10, 0.1, group.explain)
    st = statuses(group)
    leader = next(s for s in st.values() if s.is_leader)
    assert group.master() == leader.self_id  # the leader is the name server's master
    assert {s.leader for s in st.values()} == {leader.self_id}
    assert {s.group for s in st.values()} == {GROUP}
    assert [m.id for m in leader.members] == group.ids
    assert all(m.match_index == leader.last_index for m in leader.members)
    assert all(not s.members for s in st.values() if not s.is_leader)  # only the leader knows matches
    assert all(s.persisted_index == s.last_index >= 20 for s in st.values())
    assert {s.broker_id for s in st.values()} == {0, *(int(n[1:]) + 1 for n in group.ids if n != leader.self_id)}

    out = CliRunner().invoke(cli, ["admin", "dledgerStatus", "-n", group.namesrv_addr])
    assert out.exit_code == 0, out.output
    rows = {ln.split()[0]: ln.split() for ln in out.output.splitlines() if ln.startswith("n")}
    assert f"DLedger group {GROUP}" in out.output
    assert sorted(rows) == group.ids
    # member, addr, role, term, leader, log end, commit, applied, lag
    assert [rows[n][2] for n in group.ids].count("LEADER") == 1
    assert {rows[n][3] for n in group.ids} == {str(leader.term)}
    assert {rows[n][8] for n in group.ids} == {"0"}
    by_cluster = CliRunner().invoke(cli, ["admin", "dledgerStatus", "-n", group.namesrv_addr, "-c", "DLedgerCluster"])
    by_broker = CliRunner().invoke(cli, ["admin", "dledgerStatus", "-n", group.namesrv_addr, "-b", group.addr("n1")])
    assert by_cluster.exit_code == 0 and by_broker.exit_code == 0, by_cluster.output + by_broker.output
    assert all(group.addr(n) in by_broker.output for n in group.ids)


def test_dledger_metrics_follow_the_raft_status(group: DLedgerGroup) -> None:
    wait_until("every member caught up", lambda: caught_up(group), 10, 0.1, group.explain)
    st = statuses(group)
    leader = next(n for n, s in st.items() if s.is_leader)
    for n in group.ids:
        m = scrape(group.metrics_ports[n])
        labels = (("broker", GROUP), ("group", GROUP))
        assert m[("ledgermq_dledger_term", labels)] == st[n].term
        assert m[("ledgermq_dledger_is_leader", labels)] == (1 if n == leader else 0)
        assert m[("ledgermq_dledger_commit_index", labels)] == st[n].commit_index
        assert m[("ledgermq_dledger_last_index", labels)] == st[n].last_index
        lags = {dict(k[1])["member"]: v for k, v in m.items() if k[0] == "ledgermq_dledger_member_lag"}
        assert lags == ({p: 0 for p in group.ids} if n == leader else {})
        assert not any(k[0].startswith("ledgermq_ha_") for k in m)
    dashboard = (Path(__file__).resolve().parents[2] / "conf" / "grafana-ledgermq.json").read_text()
    wanted = set(re.findall(r"\bledgermq_dledger_[a-z_]+", dashboard))
    assert wanted and wanted <= {k[0] for k in scrape(group.metrics_ports[leader])}


def test_transfer_leader_moves_the_master_and_sends_keep_working(group: DLedgerGroup) -> None:
    wait_until("every member caught up", lambda: caught_up(group), 10, 0.1, group.explain)
    before = statuses(group)
    old = next(n for n, s in before.items() if s.is_leader)
    target = next(n for n in group.ids if n != old)
    follower = next(n for n in group.ids if n not in (old, target))

    async def ask_follower() -> str:
        async with AdminClient(group.namesrv_addr, timeout=3.0) as admin:
            try:
                await admin.dledger_transfer_leader(group.addr(follower), target)
            except AdminResponseError as exc:
                return str(exc)
        return "accepted"

    refusal = asyncio.run(ask_follower())
    assert f"the leader is {old}" in refusal, refusal

    outcomes: list[tuple[float, str]] = []  # (monotonic time, SEND_OK or why not)
    stop = threading.Event()

    def steady_sends() -> None:  # a producer sending throughout the handover, one send at a time
        async def run() -> None:
            producer = Producer("dl-ops-steady", group.namesrv_addr, send_timeout=3.0)
            await producer.start()
            try:
                i = 0
                while not stop.is_set() and i < 5000:
                    try:
                        status = (await producer.send(Message(TOPIC, f"steady-{i}".encode()))).status.name
                    except Exception as exc:
                        status = f"{type(exc).__name__}: {exc}"
                        await asyncio.sleep(0.01)  # an application's pause before it tries again
                    outcomes.append((time.monotonic(), status))
                    i += 1
            finally:
                await producer.shutdown()

        asyncio.run(run())

    def ok_streak(n: int) -> bool:
        tail = outcomes[-n:]
        return len(tail) == n and all(st == "SEND_OK" for _, st in tail)

    sender = threading.Thread(target=steady_sends, daemon=True)
    sender.start()
    try:
        wait_until("steady sends", lambda: ok_streak(20), 10)
        started = time.monotonic()
        out = CliRunner().invoke(
            cli, ["admin", "transferLeader", "-n", group.namesrv_addr, "-g", GROUP, "-t", target, "--timeout", "15"]
        )
        returned = time.monotonic()
        assert out.exit_code == 0, out.output + group.explain()
        wait_until("20 sends in a row after the handover", lambda: ok_streak(20), 10)
    finally:
        stop.set()
        sender.join(15)
    assert not sender.is_alive()
    failed = [(t, st) for t, st in outcomes if st != "SEND_OK"]
    window = failed[-1][0] - failed[0][0] if failed else 0.0
    tail_s = (failed[-1][0] - returned) if failed else 0.0
    print(
        f"\ntransferLeader {old} -> {target}: {returned - started:.2f}s; {len(outcomes)} sends, "
        f"{len(failed)} failed within {window:.2f}s (last {tail_s:+.2f}s after the command returned)"
        + (f", e.g. {failed[0][1][:200]}" if failed else "")
    )
    # Refusals during the handover ("leadership is being transferred", "not the DLedger
    # leader") make the producer back off until its route names the new master, within
    # the send's own retries: the application sees no failed send at all.
    assert not failed, f"{len(failed)} sends failed during the transfer: {failed[:3]}"
    assert f"{old} -> {target}" in out.output and group.addr(target) in out.output
    assert group.master() == target  # the name server's master changed before the command returned
    now = statuses(group)
    assert now[target].is_leader and now[target].term > before[old].term
    assert send(group, 10, "after") == [SendStatus.SEND_OK] * 10
    wait_until("every member caught up", lambda: caught_up(group), 10, 0.1, group.explain)
    again = CliRunner().invoke(cli, ["admin", "transferLeader", "-n", group.namesrv_addr, "-g", GROUP, "-t", target])
    assert again.exit_code == 0, again.output  # already the leader: nothing to do
    unknown = CliRunner().invoke(cli, ["admin", "transferLeader", "-n", group.namesrv_addr, "-g", GROUP, "-t", "n9"])
    assert unknown.exit_code == 1 and "'n9' is not a live member" in unknown.output


def test_a_broker_not_in_dledger_mode_refuses_clearly(tmp_path: Path) -> None:
    async def run() -> tuple[str, str]:
        cfg = BrokerConfig(broker_name="plain", broker_ip1=HOST, listen_host=HOST, listen_port=free_port(),
                           ha_listen_port=free_port(), namesrv_addr="")  # fmt: skip
        app = BrokerApp(cfg, StoreConfig(root_dir=str(tmp_path), mapped_file_size_commitlog=256 * 1024))
        await asyncio.wait_for(app.start(), 20)
        try:
            async with AdminClient("", timeout=3.0) as admin:
                addr = f"{HOST}:{app.port}"
                errors = []
                for call in (admin.dledger_status(addr), admin.dledger_transfer_leader(addr, "n1")):
                    with pytest.raises(AdminResponseError) as info:
                        await call
                    errors.append(str(info.value))
                return errors[0], errors[1]
        finally:
            await app.stop()

    status_err, transfer_err = asyncio.run(run())
    assert "not in DLedger mode" in status_err and "not in DLedger mode" in transfer_err
