"""TLS settings read as RocketMQ reads them, refusals by key name, and certificates reloaded from disk."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from ledgermq.cli.tls_setup import tls_settings
from ledgermq.errors import ConfigError
from ledgermq.net.tls.contexts import ContextSource, server_context
from ledgermq.net.tls.devca import DevCA, dev_tls_properties, make_dev_pki
from ledgermq.net.tls.settings import ClientAuth, TlsMode, TlsSettings


def test_the_tls_config_file_wins_except_for_mode_and_enable(tmp_path: Path) -> None:
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        "tls.server.mode=disabled\ntls.test.mode.enable=false\ntls.server.certPath=s.pem\n"
        "tls.server.keyPath=s.key\ntls.server.need.client.auth=OPTIONAL\n"
        "tls.server.trustCertPath=ca.pem\n"
    )
    s = TlsSettings.from_properties(
        {"tls.server.mode": "Enforcing", "tls.config.file": str(tls_file), "tls.server.certPath": "/ignored.pem"}
    )
    assert s.server_mode is TlsMode.ENFORCING  # the mode is not read from the file
    assert s.enable  # unset: follows "the mode is enforcing" (RocketMQ's NettyClientConfig)
    assert s.server_cert_path == str(tmp_path / "s.pem")  # the file wins; relative to the file
    assert s.server_need_client_auth is ClientAuth.OPTIONAL


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"tls.server.mode": "strict"}, "tls.server.mode='strict'"),
        ({"tls.server.mode": "enforcing", "tls.server.certPath": "/x.pem"}, "tls.test.mode.enable=false"),
        ({"tls.server.mode": "enforcing", "tls.test.mode.enable": "false"}, "tls.server.certPath"),
        ({"tls.config.file": "/no/such/tls.properties"}, "tls.config.file=/no/such/tls.properties"),
        ({"useTLS": "true", "tls.enable": "false"}, "useTLS=true contradicts tls.enable=false"),
        (
            {
                "tls.server.mode": "permissive",
                "tls.test.mode.enable": "false",
                "tls.server.certPath": "/c",
                "tls.server.keyPath": "/k",
                "tls.server.need.client.auth": "require",
            },
            "tls.server.trustCertPath",
        ),
    ],
)
def test_unusable_settings_stop_start_up_naming_the_key(props: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(".", r"\.")):
        tls_settings(props, None)


def test_a_certificate_that_does_not_load_names_its_keys(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate")
    s = TlsSettings(
        server_mode=TlsMode.ENFORCING,
        test_mode=False,
        server_cert_path=str(tmp_path / "bad.pem"),
        server_key_path=str(tmp_path / "bad.pem"),
    )
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath=.*bad\.pem"):
        server_context(s)


def test_changed_certificates_are_used_for_new_connections(tmp_path: Path) -> None:
    pki = make_dev_pki(tmp_path)
    (tmp_path / "tls.properties").write_text(dev_tls_properties(pki))
    s = tls_settings({"tls.server.mode": "enforcing", "tls.config.file": str(tmp_path / "tls.properties")}, None)
    now = [0.0]
    source = ContextSource("server", lambda: server_context(s), s.watched_files(), 2.0, monotonic=lambda: now[0])
    first = source.get()
    # a new server certificate from another CA, written over the old files
    DevCA("rotated CA").issue("rotated", pki.server.cert_path, pki.server.key_path)
    os.utime(pki.server.cert_path, ns=(1, os.stat(pki.server.cert_path).st_mtime_ns + 10**9))
    assert source.get() is first  # not looked at before the interval
    now[0] = 2.0
    second = source.get()
    assert second is not first and source.reloads == 1
    # a half-written change (the key no longer matches) keeps the last good context
    DevCA("x").issue("half", tmp_path / "other.pem", pki.server.key_path)
    now[0] = 4.0
    assert source.get() is second and source.reload_failures == 1
    now[0] = 6.0
    assert source.get() is second and source.reload_failures == 1  # the same failure is not retried
    assert isinstance(second, ssl.SSLContext)
