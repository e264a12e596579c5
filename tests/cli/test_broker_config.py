"""Broker config files: RocketMQ keys, unknown keys warned about, bad values stop start-up naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledgermq.cli.broker_cmd import load_broker_configs
from ledgermq.config import BrokerRole, parse_properties
from ledgermq.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("path", sorted(CONF.rglob("*.properties")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_example_configs_load(path: Path) -> None:
    broker, store = load_broker_configs(parse_properties(path.read_text()))
    assert broker.broker_name.startswith("broker-")
    assert (broker.broker_id == 0) == (store.broker_role is not BrokerRole.SLAVE)
    if path.parent.name == "2m-2s-sync" and broker.broker_id == 0:
        assert store.broker_role is BrokerRole.SYNC_MASTER


def test_example_layouts_use_distinct_ports() -> None:
    for layout in ("2m-noslave", "2m-2s-async", "2m-2s-sync"):
        ports = []
        for path in (CONF / layout).glob("*.properties"):
            broker, _ = load_broker_configs(parse_properties(path.read_text()))
            ports += [broker.listen_port, broker.ha_port]
        assert len(ports) == len(set(ports)), layout


@pytest.mark.parametrize(
    ("key", "value"),
    [("listenPort", "ten"), ("brokerId", "-1"), ("flushDiskType", "NEVER"), ("autoCreateTopicEnable", "maybe")],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_broker_configs({key: value})


def test_broker_process_fails_fast_on_a_bad_value(tmp_path: Path) -> None:
    conf = tmp_path / "broker.properties"
    conf.write_text(f"brokerName=b\nlistenPort=notaport\nstorePathRootDir={tmp_path / 'store'}\n")
    out = subprocess.run(
        [sys.executable, "-m", "ledgermq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "listenPort" in out.stderr and "Traceback" not in out.stderr


def test_unknown_keys_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        load_broker_configs({"brokerName": "b", "noSuchKey": "1"})
    assert "noSuchKey" in caplog.text


def test_dledger_mode_is_refused_until_the_broker_runs_it() -> None:
    """Nothing accepted silently: a DLedger config must not start a broker that cannot honour it."""
    with pytest.raises(ConfigError, match="enableDLegerCommitLog"):
        load_broker_configs(
            {"enableDLegerCommitLog": "true", "dLegerSelfId": "n0", "dLegerPeers": "n0-127.0.0.1:40911"}
        )
