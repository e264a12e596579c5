"""Without a cluster: the console's TLS options (refused when they cannot be used, passed on by
``cluster up --tls``), and what it reads from a broker's status table in controller mode and
about timers."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ledgermq.cli.cluster.console import console_args
from ledgermq.cli.console_cmd import console
from ledgermq.cli.tls_client_options import tls_options_from_flags
from ledgermq.client.tls import TlsOptions
from ledgermq.console.cluster_view import TimerFacts
from ledgermq.console.controller_view import controller_facts


def test_tls_options_given_without_tls_or_half_given_are_refused() -> None:
    assert tls_options_from_flags(False, None, None, None, None, False) is None
    runner = CliRunner()
    for args, why in [
        (["--tls-trust-cert", "ca.pem"], "--tls-trust-cert needs --tls"),
        (["--tls-insecure"], "--tls-insecure needs --tls"),
        (["--tls", "--tls-cert", "client.pem"], "cert_path and key_path go together"),
    ]:
        result = runner.invoke(console, ["-n", "127.0.0.1:1", "--port", "0", *args])
        assert result.exit_code == 2 and why in result.output, (args, result.output)
    tls = tls_options_from_flags(True, "ca.pem", "c.pem", "c.key", "pw", True)
    assert tls == TlsOptions(
        trust_cert_path="ca.pem", cert_path="c.pem", key_path="c.key", key_password="pw", auth_server=False
    )


def test_cluster_up_gives_its_console_the_client_certificate() -> None:
    assert "--tls" not in console_args("127.0.0.1:9876", 8080, None)
    args = console_args("127.0.0.1:9876", 8080, TlsOptions(trust_cert_path="ca", cert_path="c", key_path="k"))
    assert args[args.index("--tls-trust-cert") + 1] == "ca" and args[args.index("--tls-key") + 1] == "k"
    assert args[args.index("--tls-cert") + 1] == "c"


def test_controller_keys_of_a_broker_status() -> None:
    assert controller_facts({"brokerVersionDesc": "V4_9_7"}) is None  # not in controller mode
    facts = controller_facts(
        {
            "controllerRole": "MASTER",
            "brokerControllerId": "2",
            "masterBrokerId": "2",
            "masterEpoch": "3",
            "syncStateSet": "1,2",
            "syncStateSetEpoch": "5",
        }
    )
    assert facts is not None
    assert (facts.role, facts.broker_id, facts.master_epoch, facts.sync_state_set) == ("MASTER", 2, 3, (1, 2))
    assert facts.sync_state_set_epoch == 5
    lone = controller_facts({"controllerRole": "STARTING", "syncStateSet": "", "masterEpoch": "x"})
    assert lone is not None and lone.sync_state_set == () and lone.master_epoch == -1  # unreadable: -1, not 0


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({}, None),  # a broker without timers
        (
            {"timerPending": "7", "timerOffsetBehind": "2", "timerReadBehind": "4", "timerDelivered": "10"},
            TimerFacts(pending=7, unfiled=2, read_behind_s=4, delivered=10),
        ),
    ],
)
def test_timer_keys_of_a_broker_status(table: dict[str, str], expected: TimerFacts | None) -> None:
    assert TimerFacts.from_table(table) == expected
