"""How ``ledgermq admin`` lays out what it prints (tables and text; no network calls)."""

from __future__ import annotations

import datetime as dt

from rich import box
from rich.table import Table

from ledgermq.admin.model import (
    ClusterInfo,
    DLedgerStatus,
    HARuntimeInfo,
)
from ledgermq.protocol.message import MessageRecord
from ledgermq.protocol.route import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig, TopicRouteData

BODY_PREVIEW = 1024


# -- plumbing ----------------------------------------------------------------------------


NUMERIC_COLUMNS = {
    "BID",
    "QID",
    "Min Offset",
    "Max Offset",
    "Broker Offset",
    "Consumer Offset",
    "Diff",
    "ReadQueue",
    "WriteQueue",
    "Perm",
    "Offset",
    "Count",
    "TPS",
    "Diff Total",
    "InTotalYest",
    "OutTotalYest",
    "InTotalToday",
    "OutTotalToday",
    "SlaveAckOffset",
    "LagTime(ms)",
    "SinceLastAck(ms)",
    "TransferSpeed(KB/s)",
    "TransferFromWhere",
    "Term",
    "LogEnd",
    "Commit",
    "Applied",
    "Lag",
}


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for name in columns:
        numeric = name.lstrip("#") in NUMERIC_COLUMNS
        table.add_column(name, justify="right" if numeric else "left", no_wrap=True)
    return table


def human_ms(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString2``: local time, ``yyyy-MM-dd HH:mm:ss,SSS``."""
    stamp = dt.datetime.fromtimestamp(ms / 1000)
    return stamp.strftime("%Y-%m-%d %H:%M:%S,") + f"{stamp.microsecond // 1000:03d}"


def perm_string(perm: int) -> str:
    """``PermName.perm2String``: 6 -> "RW-"."""
    return (
        ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")
    )


def topic_config_string(tc: TopicConfig) -> str:
    """``TopicConfig.toString`` as mqadmin updateTopic prints it."""
    return (
        f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
        f"writeQueueNums={tc.write_queue_nums}, perm={perm_string(tc.perm)}, topicFilterType={tc.topic_filter_type}, "
        f"topicSysFlag={tc.topic_sys_flag}, order={'true' if tc.order else 'false'}]"
    )


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def _body_preview(body: bytes) -> str:
    text = body[:BODY_PREVIEW].decode("utf-8", "replace")
    more = f" ... ({len(body)} bytes)" if len(body) > BODY_PREVIEW else ""
    return text + more


# -- the group ---------------------------------------------------------------------------


def route_table(route: TopicRouteData) -> Table:
    """``topicRoute -l``: one row per broker group, then the totals."""
    table = _table("#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm")
    queues = {q.broker_name: q for q in route.queue_datas}
    total_read = total_write = 0
    for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
        q = queues.get(data.broker_name)
        addrs = "{" + ", ".join(f"{bid}={addr}" for bid, addr in sorted(data.broker_addrs.items())) + "}"
        if q is None:
            table.add_row(data.cluster, data.broker_name, addrs, "", "", "")
            continue
        total_read += q.read_queue_nums
        total_write += q.write_queue_nums
        table.add_row(
            data.cluster, data.broker_name, addrs, str(q.read_queue_nums), str(q.write_queue_nums), str(q.perm)
        )
    table.add_section()
    table.add_row("Total:", str(len(queues)), "", str(total_read), str(total_write), "")
    return table


def _first_float(text: str | None) -> float:
    try:
        return float((text or "").split(" ")[0])
    except ValueError:
        return 0.0


def _as_int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _brokers_by_cluster(info: ClusterInfo) -> list[tuple[str, str, int, str]]:
    rows: list[tuple[str, str, int, str]] = []
    for cluster in sorted(info.cluster_addr_table):
        for name in info.broker_names(cluster):
            data = info.broker_addr_table.get(name)
            if data is not None:
                rows.extend((cluster, name, bid, addr) for bid, addr in sorted(data.broker_addrs.items()))
    return rows


def cluster_base_table(info: ClusterInfo, runtime: dict[str, dict[str, str] | None], now_ms: int) -> Table:
    table = _table(
        "#Cluster Name",
        "#Broker Name",
        "#BID",
        "#Addr",
        "#Version",
        "#InTPS(LOAD)",
        "#OutTPS(LOAD)",
        "#PCWait(ms)",
        "#Hour",
        "#SPACE",
    )
    for cluster, name, bid, addr in _brokers_by_cluster(info):
        kv = runtime.get(addr) or {}
        earliest = _as_int(kv.get("earliestMessageTimeStamp"))
        hour = (now_ms - earliest) / 3_600_000 if earliest > 0 else 0.0
        tps_in = f"{_first_float(kv.get('putTps')):9.2f}".strip()
        tps_out = f"{_first_float(kv.get('getTransferedTps')):9.2f}".strip()
        load_in = f"({kv.get('sendThreadPoolQueueSize', '')},{kv.get('sendThreadPoolQueueHeadWaitTimeMills', '')}ms)"
        load_out = f"({kv.get('pullThreadPoolQueueSize', '')},{kv.get('pullThreadPoolQueueHeadWaitTimeMills', '')}ms)"
        table.add_row(
            cluster,
            name,
            str(bid),
            addr,
            kv.get("brokerVersionDesc", ""),
            tps_in + load_in,
            tps_out + load_out,
            kv.get("pageCacheLockTimeMills", ""),
            f"{hour:.2f}",
            f"{_first_float(kv.get('commitLogDiskRatio')):.4f}",
        )
    return table


def cluster_more_table(info: ClusterInfo, runtime: dict[str, dict[str, str] | None]) -> Table:
    table = _table("#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest", "#InTotalToday", "#OutTotalToday")
    for cluster, name, _bid, addr in _brokers_by_cluster(info):
        kv = runtime.get(addr) or {}

        def n(key: str, kv: dict[str, str] = kv) -> int:
            return _as_int(kv.get(key))

        table.add_row(
            cluster,
            name,
            str(n("msgPutTotalTodayMorning") - n("msgPutTotalYesterdayMorning")),
            str(n("msgGetTotalTodayMorning") - n("msgGetTotalYesterdayMorning")),
            str(n("msgPutTotalTodayNow") - n("msgPutTotalTodayMorning")),
            str(n("msgGetTotalTodayNow") - n("msgGetTotalTodayMorning")),
        )
    return table


def _ms_or_dash(ms: int) -> str:
    return "-" if ms < 0 else str(ms)


def ha_status_text(addr: str, info: HARuntimeInfo, now_ms: int) -> tuple[str, Table | None]:
    """``mqadmin haStatus`` for one broker: the tab-separated header lines, then a table
    with one row per slave (a master) or nothing more (a slave: the header lines hold the
    replication client's figures). Lag time is the age of the oldest message the slave has
    not acknowledged; SinceLastAck the time since its last report."""
    if info.master:
        head = (
            f"#MasterAddr\t{addr}\n#MasterCommitLogMaxOffset\t{info.master_commit_log_max_offset}\n"
            f"#SlaveNum\t{sum(1 for c in info.connections if c.connected)}\n#InSyncSlaveNum\t{info.in_sync_slave_nums}"
        )
        head += f"\n#Epoch\t{info.epoch}"
        if info.recovering:
            head += f"\n#Recovering\ttrue ({info.write_fence})"
        if info.recovery_note:
            head += f"\n#LastRecovery\t{info.recovery_note}"
        if info.truncated_slaves:
            head += f"\n#TruncatedSlaves\t{info.truncated_slaves}"
        head += "".join(f"\n{line}" for line in _repair_lines(info, "slaves"))
        table = _table(
            "#SlaveAddr",
            "#SlaveAckOffset",
            "#Diff",
            "#LagTime(ms)",
            "#SinceLastAck(ms)",
            "#TransferSpeed(KB/s)",
            "#Status",
            "#TransferFromWhere",
            "#Note",
        )
        for c in info.connections:
            status = "OK" if c.in_sync else "Fall Behind" if c.connected else "Disconnected"
            table.add_row(
                c.addr,
                str(c.slave_ack_offset),
                str(c.diff),
                _ms_or_dash(c.lag_time_ms),
                _ms_or_dash(c.since_last_ack_ms(now_ms)),
                f"{c.transferred_byte_in_second / 1024:.2f}",
                status,
                str(c.transfer_from_where),
                c.closed_reason,
            )
        return "\n" + head, table
    ci = info.client
    lines = [
        f"#BrokerAddr\t{addr}",
        f"#MasterAddr\t{ci.master_addr or '-'}",
        f"#Connected\t{'true' if ci.connected else 'false'}",
        f"#CommitLogMaxOffset\t{ci.max_offset}",
        f"#ReportedOffset\t{ci.reported_offset}",
        f"#LastReadTime\t{human_ms(ci.last_read_timestamp) if ci.last_read_timestamp > 0 else '-'}",
        f"#LastWriteTime\t{human_ms(ci.last_write_timestamp) if ci.last_write_timestamp > 0 else '-'}",
        f"#SinceLastRead(ms)\t{max(0, now_ms - ci.last_read_timestamp) if ci.last_read_timestamp > 0 else '-'}",
        f"#Connects\t{ci.connects}",
    ]
    lines.append(f"#Epoch\t{ci.epoch}")
    if ci.truncations:
        lines.append(f"#Truncations\t{ci.truncations} ({ci.truncated_bytes} bytes)")
    if ci.refused:
        lines.append(f"#Refused\t{ci.refused}")
    if ci.last_error:
        lines.append(f"#LastError\t{ci.last_error}")
    lines += _repair_lines(info, "its master")
    return "\n" + "\n".join(lines), None


def _repair_lines(info: HARuntimeInfo, peers: str) -> list[str]:
    """Damaged commit-log ranges and their repair from a replica; nothing when there never were any."""
    lines: list[str] = []
    if info.repairs_taken or info.repairs_given:
        lines.append(
            f"#Repairs\ttaken {info.repairs_taken} ({info.repair_bytes_taken} bytes) from {peers}, "
            f"given {info.repairs_given} ({info.repair_bytes_given} bytes) to {peers}"
        )
    if info.repairs_expired:
        lines.append(
            f"#Expired\t{info.repairs_expired} damaged range(s) ({info.repair_bytes_expired} bytes) let go: "
            "the master's retention had deleted them"
        )
    if info.last_repair:
        lines.append(f"#LastRepair\t{info.last_repair}")
    if info.damaged_ranges:
        ranges = ", ".join(f"[{a}, {b})" for a, b in info.damaged_ranges)
        lines.append(f"#DamagedRanges\t{ranges} (refused until a replica repairs them)")
    lines += [f"#Unrepaired\t{note}" for note in info.unrepaired]
    return lines


def message_grid(rec: MessageRecord) -> Table:
    """The fields ``mqadmin queryMsgById`` prints, body shown inline instead of in a file."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    props = "{" + ", ".join(f"{k}={v}" for k, v in rec.properties.items()) + "}"
    rows = [
        ("OffsetID:", rec.offset_msg_id),
        ("Topic:", rec.topic),
        ("Tags:", f"[{rec.tags}]" if rec.tags is not None else "[null]"),
        ("Keys:", f"[{rec.properties['KEYS']}]" if "KEYS" in rec.properties else "[null]"),
        ("Queue ID:", str(rec.queue_id)),
        ("Queue Offset:", str(rec.queue_offset)),
        ("CommitLog Offset:", str(rec.physical_offset)),
        ("Reconsume Times:", str(rec.reconsume_times)),
        ("Born Timestamp:", human_ms(rec.born_timestamp)),
        ("Store Timestamp:", human_ms(rec.store_timestamp)),
        ("Born Host:", _host(rec.born_host)),
        ("Store Host:", _host(rec.store_host)),
        ("System Flag:", str(rec.sysflag)),
        ("Properties:", props),
        ("Message Body:", _body_preview(rec.body)),
    ]
    for name, value in rows:
        grid.add_row(f"{name:<20}", value)
    return grid


def dledger_group_table(group: str, members: list[tuple[str, DLedgerStatus | str]]) -> Table:
    """``admin dledgerStatus`` for one group: a row per member (its address and what it
    answered, or why it did not). Lag is the leader's last index minus the member's match
    index, as the leader of the highest term answering sees it ("-" when no leader answered).
    Repairs is "found/completed": how often the member found its log damaged since its broker
    started, and how many of those repairs from the leader ended; a member repairing now shows
    "repairing until index N" beside its role (the index its log must hold again)."""
    answers = [st for _, st in members if isinstance(st, DLedgerStatus)]
    leaders = [st for st in answers if st.is_leader]
    leader = max(leaders, key=lambda st: st.term) if leaders else None
    lags = {m.id: f"{m.lag} (stuck)" if m.stuck else str(m.lag) for m in leader.members} if leader is not None else {}
    table = _table(
        "#Member", "#Addr", "#Role", "#Term", "#Leader", "#LogEnd", "#Commit", "#Applied", "#Lag", "#Repairs",
        title=f"DLedger group {group}",
    )  # fmt: skip
    rows = sorted(members, key=lambda m: (isinstance(m[1], str), m[1] if isinstance(m[1], str) else m[1].self_id))
    for addr, st in rows:
        if isinstance(st, str):
            table.add_row("?", addr, f"UNREACHABLE ({st})", "", "", "", "", "", "", "")
            continue
        lag = lags.get(st.self_id)
        role = st.role + (f" ({st.failed})" if st.failed else "")
        if st.repairing_until:
            role += f" (repairing until index {st.repairing_until})"
        table.add_row(
            st.self_id,
            addr,
            role,
            str(st.term),
            st.leader or "-",
            str(st.last_index),
            str(st.commit_index),
            str(st.applied_index),
            "-" if lag is None else lag,
            f"{st.repairs}/{st.repairs_completed}",
        )
    return table
