"""``cluster up --tls``: a throw-away CA for the dev cluster, and every server in enforcing mode
with mutual TLS (net/tls/devca.py makes the certificates with the ``cryptography`` package)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledgermq.client.tls import TlsOptions
from ledgermq.net.tls.devca import DevPki, dev_tls_properties, make_dev_pki


@dataclass(frozen=True, slots=True)
class ClusterTls:
    pki: DevPki
    config_file: Path

    def server_keys(self) -> str:
        """The lines every server's config gets: TLS only on its ports, TLS on its own links."""
        return f"tls.server.mode=enforcing\ntls.enable=true\ntls.config.file={self.config_file}\n"

    def client_options(self) -> TlsOptions:
        """How the supervisor (and a developer's client) connects."""
        return TlsOptions(
            trust_cert_path=str(self.pki.ca.cert_path),
            cert_path=str(self.pki.client.cert_path),
            key_path=str(self.pki.client.key_path),
        )

    def admin_flags(self) -> str:
        """``ledgermq admin``'s options that reach this cluster (with a leading space)."""
        o = self.client_options()
        return f" --tls --tls-trust-cert {o.trust_cert_path} --tls-cert {o.cert_path} --tls-key {o.key_path}"

    def admin_hint(self, namesrv: str) -> str:
        return f"  TLS (enforcing, mutual): ledgermq admin{self.admin_flags()} clusterList -n {namesrv}"


def make_cluster_tls(directory: Path, hosts: tuple[str, ...]) -> ClusterTls:
    """A fresh CA and certificates under ``directory`` (replacing an older run's)."""
    pki = make_dev_pki(directory, hosts)
    config_file = directory / "tls.properties"
    config_file.write_text(dev_tls_properties(pki))
    return ClusterTls(pki, config_file)
