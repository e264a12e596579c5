"""Pure session decisions of both HA ends, plus HAConfig keys."""

from __future__ import annotations

import pytest

from ledgermq.errors import ConfigError
from ledgermq.ha.codec import FrameDecoder, ReportDecoder, encode_header, encode_report
from ledgermq.ha.config import HAConfig
from ledgermq.ha.session import (
    Accept,
    Ack,
    Close,
    Heartbeat,
    Idle,
    MasterSession,
    Reject,
    Send,
    SlaveSession,
    first_transfer_offset,
)

SEG = 64 * 1024
KB32 = 32 * 1024


def master(now: float = 0.0, batch: int = KB32) -> MasterSession:
    return MasterSession(
        segment_size=SEG, batch_size=batch, heartbeat_interval=5.0, housekeeping_interval=20.0, now=now
    )


def slave(now: float = 0.0) -> SlaveSession:
    return SlaveSession(heartbeat_interval=5.0, housekeeping_interval=20.0, segment_size=SEG, now=now)


# -- master ---------------------------------------------------------------------------


def test_first_transfer_offset() -> None:
    assert first_transfer_offset(0, 0, SEG) == 0
    assert first_transfer_offset(0, 3 * SEG + 100, SEG) == 3 * SEG
    assert first_transfer_offset(0, 3 * SEG, SEG) == 3 * SEG
    assert first_transfer_offset(1234, 3 * SEG + 100, SEG) == 1234


def test_no_transfer_before_the_first_report() -> None:
    m = master()
    assert m.plan(0, 5 * SEG, now=100.0) == Idle(None)
    assert m.needed_from() is None


def test_first_report_zero_starts_at_the_last_segment() -> None:
    m = master()
    master_max = 3 * SEG + 500
    assert m.on_report(0, master_max, now=1.0) == Ack(0, first=True)
    assert m.next_offset == 3 * SEG
    assert m.plan(0, master_max, now=1.0) == Send(3 * SEG, 500)
    assert m.needed_from() == 3 * SEG


def test_first_report_nonzero_starts_there_and_later_reports_are_acks() -> None:
    m = master()
    assert m.on_report(1000, 5000, now=1.0) == Ack(1000, first=True)
    assert m.plan(0, 5000, now=1.0) == Send(1000, 4000)
    m.on_sent(1000, 4000, now=1.0)
    assert m.on_report(5000, 5000, now=2.0) == Ack(5000, first=False)
    assert m.ack_offset == 5000 and m.request_offset == 1000


def test_report_beyond_master_max_disconnects_and_is_no_ack() -> None:
    m = master()
    decision = m.on_report(10_000, 9_999, now=1.0)
    assert isinstance(decision, Close) and "beyond" in decision.reason
    assert m.ack_offset is None and m.next_offset is None
    m2 = master()
    m2.on_report(100, 500, now=0.0)
    assert isinstance(m2.on_report(501, 500, now=1.0), Close)
    assert m2.ack_offset == 100


def test_window_capped_by_batch_segment_end_and_max() -> None:
    m = master()
    m.on_report(SEG - 1000, 10 * SEG, now=0.0)
    assert m.plan(0, 10 * SEG, now=0.0) == Send(SEG - 1000, 1000)  # segment end
    m.on_sent(SEG - 1000, 1000, now=0.0)
    assert m.plan(0, 10 * SEG, now=0.0) == Send(SEG, KB32)  # batch size
    m.on_sent(SEG, KB32, now=0.0)
    assert m.plan(0, SEG + KB32 + 10, now=0.0) == Send(SEG + KB32, 10)  # master max
    with pytest.raises(ValueError):
        m.on_sent(0, 10, now=0.0)


def test_heartbeat_only_when_idle_for_the_interval() -> None:
    m = master(now=0.0)
    m.on_report(100, 100, now=0.0)
    assert m.plan(0, 100, now=1.0) == Idle(4.0)
    assert m.plan(0, 100, now=5.0) == Heartbeat(100)
    m.on_sent(100, 0, now=5.0)
    assert m.plan(0, 100, now=6.0) == Idle(4.0)


def test_master_closes_when_the_slave_needs_deleted_or_truncated_data() -> None:
    m = master()
    m.on_report(100, 5 * SEG, now=0.0)
    assert isinstance(m.plan(SEG, 5 * SEG, now=0.0), Close)  # segment at 100 is gone
    m2 = master()
    m2.on_report(4000, 5000, now=0.0)
    assert isinstance(m2.plan(0, 3000, now=0.0), Close)  # master shrank below the slave


def test_master_housekeeping() -> None:
    m = master(now=0.0)
    assert not m.expired(20.0)
    assert m.expired(20.1)
    m.on_bytes(15.0)
    assert not m.expired(30.0)


# -- slave ----------------------------------------------------------------------------


def test_slave_accepts_only_at_its_max_offset() -> None:
    s = slave()
    assert s.check_frame(500, 10, local_max=500, local_empty=False, now=0.0) == Accept()
    rej = s.check_frame(400, 10, local_max=500, local_empty=False, now=0.0)
    assert isinstance(rej, Reject) and "400" in rej.reason and "500" in rej.reason
    assert isinstance(s.check_frame(600, 0, local_max=500, local_empty=False, now=0.0), Reject)  # heartbeat too


def test_empty_slave_accepts_a_segment_aligned_start() -> None:
    s = slave()
    assert s.check_frame(3 * SEG, 100, local_max=0, local_empty=True, now=0.0) == Accept()
    assert isinstance(s.check_frame(3 * SEG + 1, 100, local_max=0, local_empty=True, now=0.0), Reject)
    assert s.check_frame(777, 0, local_max=0, local_empty=True, now=0.0) == Accept()  # heartbeat


def test_slave_reports_at_once_then_on_growth_else_every_interval() -> None:
    s = slave(now=0.0)
    assert s.report_due(0, now=0.0) == 0  # at once on connecting
    s.on_reported(0, now=0.0)
    assert s.report_due(0, now=1.0) is None
    assert s.report_due(100, now=1.0) == 100  # grew
    s.on_reported(100, now=1.0)
    assert s.report_due(100, now=5.9) is None
    assert s.report_due(100, now=6.0) == 100  # heartbeat
    assert s.next_deadline(now=2.0) == pytest.approx(4.0)


def test_slave_housekeeping() -> None:
    s = slave(now=0.0)
    assert not s.expired(20.0)
    assert s.expired(20.5)
    s.on_bytes(10.0)
    assert not s.expired(25.0)


def test_sessions_linked_in_memory_replicate_a_log() -> None:
    """Master and slave sessions over in-memory bytes: the slave ends with the same log."""
    seg = 4096
    master_log = bytes((i * 7) % 251 for i in range(3 * seg + 1234))
    m = MasterSession(segment_size=seg, batch_size=1000, heartbeat_interval=5, housekeeping_interval=20, now=0)
    s = SlaveSession(heartbeat_interval=5, housekeeping_interval=20, segment_size=seg, now=0)
    reports, frames = ReportDecoder(), FrameDecoder(max_body=1000)
    slave_log = bytearray()
    slave_base: int | None = None
    to_master = encode_report(0)
    s.on_reported(0, 0)
    for _ in range(100):
        for off in reports.feed(to_master):
            assert isinstance(m.on_report(off, len(master_log), 0), Ack)
        to_master = b""
        action = m.plan(0, len(master_log), 0)
        if not isinstance(action, Send):
            break
        chunk = master_log[action.offset : action.offset + action.size]
        m.on_sent(action.offset, len(chunk), 0)
        for f in frames.feed(encode_header(action.offset, len(chunk)) + chunk):
            local_max = (slave_base or 0) + len(slave_log)
            assert s.check_frame(f.offset, len(f.body), local_max, slave_base is None, 0) == Accept()
            slave_base = f.offset if slave_base is None else slave_base
            slave_log += f.body
        due = s.report_due((slave_base or 0) + len(slave_log), 0)
        if due is not None:
            s.on_reported(due, 0)
            to_master = encode_report(due)
    assert slave_base == 3 * seg  # a fresh slave starts at the master's last segment
    assert bytes(slave_log) == master_log[3 * seg :]
    assert m.ack_offset == len(master_log)


# -- config ---------------------------------------------------------------------------


def test_config_defaults_are_rocketmq_4_9_7() -> None:
    c = HAConfig()
    assert (c.send_heartbeat_interval_ms, c.housekeeping_interval_ms, c.transfer_batch_size) == (5000, 20000, 32768)
    assert c.slave_fallbehind_max == 256 * 1024 * 1024
    assert c.master_address == ""
    assert c.resolve_listen_port(10911) == 10912
    assert HAConfig(listen_port=20000).resolve_listen_port(10911) == 20000


def test_config_from_properties_and_alias() -> None:
    c = HAConfig.from_properties(
        {"haSendHeartbeatInterval": "100", "haMasterAddress": "10.0.0.1:10912", "haMaxGapNotInSync": "1024"}
    )
    assert c.send_heartbeat_interval_ms == 100 and c.master_address == "10.0.0.1:10912"
    assert c.slave_fallbehind_max == 1024
    both = HAConfig.from_properties({"haMaxGapNotInSync": "1", "haSlaveFallbehindMax": "2"})
    assert both.slave_fallbehind_max == 2
    with pytest.raises(ConfigError, match="haMaxGapNotInSync"):
        HAConfig.from_properties({"haMaxGapNotInSync": "lots"})
    with pytest.raises(ConfigError, match="haTransferBatchSize"):
        HAConfig(transfer_batch_size=0)
