"""`ledgermq bench scale` at tiny sizes: every figure is there, and a broker that runs out of
descriptors shows up as SEND_OKs that never became readable."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from ledgermq.bench.register_proxy import Recorder
from ledgermq.bench.scale_steps import window_rates
from ledgermq.cli.main import cli
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import DataVersion, RegisterBrokerBody, TopicConfig

EVERY_FIGURE = {
    "create_seconds", "create_rate", "create_rate_first_window", "create_rate_last_window", "routed_after_s",
    "register_count", "register_bytes_total", "register_body_last", "broker_cpu_create_s", "broker_fds_after_create",
    "sent", "send_ok", "send_rate", "readable", "readable_after_s", "queues_at_1", "mismatch", "broker_cpu_send_s",
    "broker_fds", "broker_nofile", "broker_rss_mib", "stop_clean_s", "restart_clean_s", "restart_kill_s",
    "rr_one_topic_rate", "rr_spread_rate", "rr_ratio", "rr_settle_s",
}  # fmt: skip


def _run(tmp_path: Path, *extra: str) -> tuple[str, dict[str, dict[str, Any]]]:
    out = tmp_path / "scale.json"
    args = ["bench", "scale", "--duration", "1", "--round-robin-topics", "10", "--json", str(out), *extra]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("ledgermq bench scale --topics ")
    return result.output, {f["key"]: f for f in doc["figures"]}


def test_scale_bench_reports_every_figure_and_all_messages_readable(tmp_path: Path) -> None:
    output, figures = _run(tmp_path, "--topics", "20", "--queues", "2")
    assert set(figures) >= EVERY_FIGURE, EVERY_FIGURE - set(figures)
    assert not [k for k, f in figures.items() if f["alarm"]], output
    assert figures["send_ok"]["value"] == figures["readable"]["value"] == figures["queues_at_1"]["value"] == 40
    assert figures["mismatch"]["value"] == 0
    assert figures["register_count"]["value"] >= 1
    assert figures["register_body_last"]["value"] > 0
    for key in ("readable_after_s", "restart_clean_s", "restart_kill_s", "rr_one_topic_rate", "rr_spread_rate"):
        assert isinstance(figures[key]["value"], float) and figures[key]["value"] >= 0, figures[key]
        assert isinstance(figures[key]["load"], float)
    assert "MISMATCH" not in output and "ledgermq bench scale: 20 topics x 2 queues" in output


def test_scale_bench_under_a_descriptor_limit_below_the_queue_count(tmp_path: Path) -> None:
    # 320 used queues once needed 640 descriptors (a consume-queue file and its mmap each) and
    # 300 ran out: SEND_OK for messages that never became readable. Now the queues share a
    # bounded set of descriptors, so every acknowledged message is readable.
    output, figures = _run(tmp_path, "--topics", "40", "--queues", "8", "--broker-nofile", "300", "--stall", "2",
                           "--restart-timeout", "10")  # fmt: skip
    assert figures["send_ok"]["value"] == 320
    assert figures["mismatch"]["value"] == 0 and not figures["mismatch"]["alarm"]
    assert not figures["readable_after_s"]["alarm"] and "MISMATCH" not in output
    assert figures["broker_nofile"]["value"] == 300
    assert figures["broker_fds"]["value"] < 300


def test_creation_rate_windows() -> None:
    assert window_rates(0.0, [0.5, 1.0, 2.0, 4.0, 5.0], 2) == [2.0, 2 / 3, 1.0]
    assert window_rates(0.0, [], 1000) == []


def test_proxy_records_register_broker_bodies_split_across_reads() -> None:
    body = RegisterBrokerBody(DataVersion(), {"T": TopicConfig("T", 8, 8, 6, "SINGLE_TAG", 0, False)}).encode()
    frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b"}, body).encode()
    other = RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"{}").encode()
    out = io.StringIO()
    recorder = Recorder(out)
    stream = other + frame
    for i in range(0, len(stream), 7):
        recorder.feed(stream[i : i + 7])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["body"], d["topics"]) for d in lines] == [(len(body), 1)]
