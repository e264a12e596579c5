"""Without a cluster: ``ledgermq admin`` takes the shared client TLS options
(cli/tls_client_options.py), so it refuses what the console refuses, before any command runs."""

from __future__ import annotations

from click.testing import CliRunner

from ledgermq.cli.admin_cmd import admin


def test_tls_options_given_without_tls_or_half_given_are_refused_before_the_command() -> None:
    runner = CliRunner()
    for args, why in [
        (["--tls-trust-cert", "ca.pem"], "--tls-trust-cert needs --tls"),
        (["--tls-key-password", "pw"], "--tls-key-password needs --tls"),
        (["--tls-insecure"], "--tls-insecure needs --tls"),
        (["--tls", "--tls-cert", "client.pem"], "cert_path and key_path go together"),
    ]:
        result = runner.invoke(admin, [*args, "topicList", "-n", "127.0.0.1:1"])
        assert result.exit_code == 2 and why in result.output, (args, result.output)


def test_the_options_are_read_from_the_environment() -> None:
    runner = CliRunner()
    result = runner.invoke(admin, ["topicList", "-n", "127.0.0.1:1"], env={"LEDGERMQ_TLS_CERT": "client.pem"})
    assert result.exit_code == 2 and "--tls-cert needs --tls" in result.output, result.output
