"""``chaos run --tls``: a throw-away CA for the run, every process in enforcing mode with
mutual TLS, and the harness's own clients (workload, read-back, admin checks) over TLS.

The certificates name 127.0.0.1 and also the fault proxies' 127.0.0.2: the slave reaches
its master's HA port, and DLedger peers reach each other, at a proxy's address, and their
TLS clients check the address they dialled against the server's certificate. The proxies
relay bytes, so TLS runs end to end through them and a partition cuts TLS connections as
it cuts plain ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledgermq.client.tls import TlsOptions
from ledgermq.net.tls.devca import DevPki, dev_tls_properties, make_dev_pki

TLS_HOSTS = ("127.0.0.1", "127.0.0.2", "localhost")  # the layouts' HOST and PROXY_HOST


@dataclass(frozen=True, slots=True)
class ChaosTls:
    pki: DevPki
    config_file: Path

    def server_props(self) -> dict[str, object]:
        """What every server's config gets: TLS only on its ports, TLS on its own links."""
        return {"tls.server.mode": "enforcing", "tls.enable": "true", "tls.config.file": str(self.config_file)}

    def client_options(self) -> TlsOptions:
        """The harness's clients: its certificate, and the run's CA to check the servers with."""
        return TlsOptions(
            trust_cert_path=str(self.pki.ca.cert_path),
            cert_path=str(self.pki.client.cert_path),
            key_path=str(self.pki.client.key_path),
        )


def make_chaos_tls(directory: Path) -> ChaosTls:
    """A fresh CA, server and client certificates and a ``tls.config.file`` under ``directory``."""
    pki = make_dev_pki(directory, TLS_HOSTS)
    config_file = directory / "tls.properties"
    config_file.write_text(dev_tls_properties(pki))
    return ChaosTls(pki, config_file)
