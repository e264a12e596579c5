"""A throw-away certificate authority for development clusters, tests and RocketMQ's test mode.

Made with the ``cryptography`` package (an optional dependency: ``pip install
ledgermq[tls]``), never by stringing ``openssl`` commands together. Keys are ECDSA P-256:
small, and quick to make and to handshake with. Nothing here is meant for production:
the CA key sits next to the certificates it signs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.errors import ConfigError

_MISSING = (
    "making certificates needs the 'cryptography' package, which ledgermq installs only with its "
    "'tls' extra: pip install 'ledgermq[tls]'"
)


def _crypto() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ConfigError(_MISSING) from exc
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key, as PEM files."""

    cert_path: Path
    key_path: Path


@dataclass(frozen=True, slots=True)
class DevPki:
    """What ``make_dev_pki`` wrote: the CA, a server pair and a client pair."""

    ca: Issued
    server: Issued
    client: Issued


class DevCA:
    """A CA (key and self-signed certificate) that issues leaf certificates."""

    def __init__(self, name: str = "ledgermq dev CA", *, days: int = 30) -> None:
        x509, hashes, _ser, ec, _eku, NameOID = _crypto()
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.fromtimestamp(SYSTEM_CLOCK.wall_ms() / 1000, dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )  # keyCertSign, cRLSign
            .sign(self._key, hashes.SHA256())
        )

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> DevCA:
        """The CA ``write`` saved, to issue more certificates (tests: an expired one)."""
        x509, _hashes, ser, _ec, _eku, _name = _crypto()
        ca = cls.__new__(cls)
        ca.cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca._key = ser.load_pem_private_key(key_path.read_bytes(), password=None)
        return ca

    def write(self, cert_path: Path, key_path: Path) -> Issued:
        _write_pair(self.cert, self._key, cert_path, key_path)
        return Issued(cert_path, key_path)

    def issue(
        self,
        name: str,
        cert_path: Path,
        key_path: Path,
        *,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
        valid_from: dt.datetime | None = None,
        valid_until: dt.datetime | None = None,
        key_password: str = "",
    ) -> Issued:
        """A leaf certificate good for both ends of a link (server and client auth), naming
        ``hosts`` (IP addresses or DNS names) as its subject alternative names."""
        x509, hashes, _ser, ec, EKU, NameOID = _crypto()
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.fromtimestamp(SYSTEM_CLOCK.wall_ms() / 1000, dt.UTC)
        start = valid_from or now - dt.timedelta(minutes=5)
        end = valid_until or now + dt.timedelta(days=30)
        names: list[Any] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([EKU.SERVER_AUTH, EKU.CLIENT_AUTH]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        _write_pair(cert, key, cert_path, key_path, key_password)
        return Issued(cert_path, key_path)


def _write_pair(cert: Any, key: Any, cert_path: Path, key_path: Path, password: str = "") -> None:
    _x509, _hashes, ser, _ec, _eku, _name = _crypto()
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    encryption = ser.BestAvailableEncryption(password.encode()) if password else ser.NoEncryption()
    key_pem = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, encryption)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_pem)
    cert_path.write_bytes(cert.public_bytes(ser.Encoding.PEM))


def make_dev_pki(directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> DevPki:
    """A fresh CA under ``directory`` and one server and one client certificate it signed."""
    ca = DevCA()
    return DevPki(
        ca=ca.write(directory / "ca.pem", directory / "ca.key"),
        server=ca.issue("ledgermq server", directory / "server.pem", directory / "server.key", hosts=hosts),
        client=ca.issue("ledgermq client", directory / "client.pem", directory / "client.key", hosts=hosts),
    )


def dev_tls_properties(pki: DevPki, *, need_client_auth: str = "require") -> str:
    """A ``tls.config.file`` for a server that takes only ``pki``'s certificates (mutual TLS)."""
    return "\n".join(
        [
            "tls.test.mode.enable=false",
            f"tls.server.need.client.auth={need_client_auth}",
            f"tls.server.certPath={pki.server.cert_path}",
            f"tls.server.keyPath={pki.server.key_path}",
            "tls.server.authClient=true",
            f"tls.server.trustCertPath={pki.ca.cert_path}",
            f"tls.client.certPath={pki.client.cert_path}",
            f"tls.client.keyPath={pki.client.key_path}",
            "tls.client.authServer=true",
            f"tls.client.trustCertPath={pki.ca.cert_path}",
            "",
        ]
    )
