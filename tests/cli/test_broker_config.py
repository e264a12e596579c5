"""Broker config files: RocketMQ keys, unknown keys warned about, bad values stop start-up naming the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ledgermq.broker.config import BrokerConfig
from ledgermq.cli.broker_cmd import load_broker_configs
from ledgermq.config import BrokerRole, StoreConfig, known_keys, parse_properties
from ledgermq.config_keys import NO_EFFECT, REFUSED
from ledgermq.errors import ConfigError
from ledgermq.ha.config import HAConfig

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


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("filterServerNums", "2"),
        ("fetchNamesrvAddrByAddressServer", "true"),
    ],
)
def test_keys_asking_for_what_ledgermq_lacks_are_refused(key: str, value: str) -> None:
    """Nothing accepted silently: a key whose value asks for a filter server stops start-up by name."""
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}={value} is not supported"):
        load_broker_configs({"brokerName": "b", key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [("useTLS", "false"), ("tls.server.mode", "disabled"), ("tls.enable", "true"), ("filterServerNums", "0")],
)
def test_refusable_keys_asking_for_nothing_are_accepted(key: str, value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        load_broker_configs({"brokerName": "b", key: value})
    assert caplog.text == ""


def test_keys_without_effect_are_warned_about_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        load_broker_configs({"brokerName": "b", "sendMessageThreadPoolNums": "16", "transientStorePoolEnable": "true"})
    assert (
        "'sendMessageThreadPoolNums' has no effect in ledgermq: requests run as tasks on one event loop" in caplog.text
    )
    assert "'transientStorePoolEnable' has no effect" in caplog.text
    assert "unknown" not in caplog.text


def test_policy_tables_do_not_shadow_keys_the_broker_reads() -> None:
    """A key moves out of the policy tables when it is implemented; both at once would hide its checks."""
    known = known_keys(BrokerConfig) | known_keys(StoreConfig) | known_keys(HAConfig)
    assert not (set(NO_EFFECT) | set(REFUSED)) & known


def test_configuration_docs_list_every_refused_and_no_effect_key() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for k in (*NO_EFFECT, *REFUSED):
        assert f"`{k}`" in text, k


def test_name_server_refuses_a_bad_tls_value_by_name(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=0\ntls.server.mode=strict\n")
    out = subprocess.run(
        [sys.executable, "-m", "ledgermq.cli.main", "namesrv", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "tls.server.mode='strict'" in out.stderr and "Traceback" not in out.stderr
