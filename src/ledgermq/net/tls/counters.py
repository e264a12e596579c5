"""Process-wide counts of connections by transport and of TLS handshake failures by reason.

Plain integers in dicts, bumped once per connection (never per message); the broker's
metrics read them when scraped (``ledgermq_tls_*``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

INBOUND = "in"
OUTBOUND = "out"
TLS = "tls"
PLAIN = "plain"


@dataclass(slots=True)
class TlsCounters:
    connections: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(direction in|out, transport tls|plain) -> connections established."""
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(direction in|out, reason) -> connections refused or handshakes failed."""

    def connected(self, direction: str, transport: str) -> None:
        self.connections[(direction, transport)] += 1

    def failed(self, direction: str, reason: str) -> None:
        self.failures[(direction, reason)] += 1


COUNTERS = TlsCounters()
