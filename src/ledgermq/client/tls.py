"""The client's TLS options: Java's ``useTLS`` plus the ``tls.client.*`` certificates.

``use_tls=True`` alone encrypts and checks the server against the system's CAs and its
name; ``TlsOptions`` names a CA file (``trust_cert_path``), a client certificate for
servers that require one (mutual TLS), or turns the server check off
(``auth_server=False``, RocketMQ Java's default: encrypted, but anyone may answer).
Pure settings: the files are read when the client instance is made
(``client/instance/tls.py``), and re-read when they change (net/tls/contexts.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.client.errors import MQClientError


@dataclass(frozen=True, kw_only=True)
class TlsOptions:
    trust_cert_path: str = ""  # tls.client.trustCertPath: the CA(s) the server's certificate must chain to
    cert_path: str = ""  # tls.client.certPath: our certificate, for servers that ask (mutual TLS)
    key_path: str = ""  # tls.client.keyPath
    key_password: str = ""  # tls.client.keyPassword
    auth_server: bool = True  # tls.client.authServer (RocketMQ's Java client defaults to false)
    verify_hostname: bool = True  # the server's address must be named by its certificate

    def __post_init__(self) -> None:
        if bool(self.cert_path) != bool(self.key_path):
            raise MQClientError("TlsOptions: cert_path and key_path go together")


def check_tls_options(use_tls: bool, tls: TlsOptions | None) -> None:
    """Nothing accepted silently: certificates given with TLS off are an error."""
    if tls is not None and not use_tls:
        raise MQClientError("tls options given but use_tls is False")
