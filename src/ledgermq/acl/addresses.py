"""Remote-address patterns of plain_acl.yml (RocketMQ's RemoteAddressStrategyFactory).

Forms, for ``globalWhiteRemoteAddresses`` and an account's ``whiteRemoteAddress``:

* empty or absent: matches nothing;
* ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: matches every address;
* one address, IPv4 or IPv6 (``192.168.0.1``, ``::1``);
* a list, ``192.168.0.{1,2}`` (the braces close the pattern) or ``10.0.0.1,10.0.0.2``;
* an IPv4 range in one octet after the first: ``*`` or ``a-b`` (``192.168.1.*``,
  ``192.168.1.1-100``, ``192.168.*.*``, ``10.1-20.*.*``).

Two RocketMQ quirks are refused rather than copied: octets after the ranged one other than
``*`` (``192.168.1-10.5``: RocketMQ ignores the ``5`` and admits all of 192.168.1-10.*), and
IPv6 ranges (refused as unsupported). Every refusal is an AclConfigError naming the pattern.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ledgermq.errors import ConfigError

ANY_PATTERNS = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


class AclConfigError(ConfigError):
    """plain_acl.yml says something we cannot honour."""


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """A parsed pattern; ``match`` takes the peer's host (no port)."""

    text: str
    any: bool = False
    exact: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()
    head: tuple[int, ...] = ()  # IPv4 range: the fixed leading octets ...
    low: int = 0  # ... and the bounds of the next one
    high: int = -1

    def match(self, host: str) -> bool:
        if self.any:
            return True
        addr = _ip(host)
        if addr is None:
            return False
        if addr in self.exact:
            return True
        if not self.head or not isinstance(addr, ipaddress.IPv4Address):
            return False
        octets = addr.packed
        n = len(self.head)
        return tuple(octets[:n]) == self.head and self.low <= octets[n] <= self.high


NEVER = AddressPattern("")


def parse_address_pattern(text: object) -> AddressPattern:
    if text is None:
        return NEVER
    if not isinstance(text, str):
        raise AclConfigError(f"address pattern {text!r} is not a string")
    pattern = text.strip()
    if not pattern:
        return NEVER
    if pattern in ANY_PATTERNS:
        return AddressPattern(pattern, any=True)
    if pattern.endswith("}"):
        return _braces(pattern)
    if "," in pattern:
        return _listed(pattern, [p for p in pattern.split(",") if p.strip()])
    if "*" in pattern or "-" in pattern:
        return _range(pattern)
    return _listed(pattern, [pattern])


def _listed(pattern: str, items: list[str]) -> AddressPattern:
    found = []
    for item in items:
        addr = _ip(item)
        if addr is None:
            raise AclConfigError(f"address pattern {pattern!r}: {item.strip()!r} is not an IPv4 or IPv6 address")
        found.append(addr)
    if not found:
        raise AclConfigError(f"address pattern {pattern!r} lists no address")
    return AddressPattern(pattern, exact=frozenset(found))


def _braces(pattern: str) -> AddressPattern:
    """``prefix{a,b}``: the braces hold the whole last group (octet or IPv6 hextet)."""
    sep = ":" if ":" in pattern else "."
    prefix, _, last = pattern.rpartition(sep)
    if not prefix or not last.startswith("{") or "{" in prefix or "}" in prefix:
        raise AclConfigError(f"address pattern {pattern!r}: braces must hold the last part, as in 192.168.0.{{1,2}}")
    choices = [c for c in last[1:-1].split(",") if c.strip()]
    return _listed(pattern, [f"{prefix}{sep}{c.strip()}" for c in choices])


def _octet(pattern: str, text: str) -> int:
    text = text.strip()
    if not text.isdigit() or not 0 <= int(text) <= 255:
        raise AclConfigError(f"address pattern {pattern!r}: {text!r} is not an octet (0-255)")
    return int(text)


def _range(pattern: str) -> AddressPattern:
    if ":" in pattern:
        raise AclConfigError(f"address pattern {pattern!r}: IPv6 ranges are not supported (list the addresses)")
    parts = [p.strip() for p in pattern.split(".") if p.strip()]
    if len(parts) != 4:
        raise AclConfigError(f"address pattern {pattern!r}: an IPv4 range has four parts, as in 192.168.1.*")
    ranged = next((i for i in range(1, 4) if parts[i] == "*" or "-" in parts[i]), None)
    if ranged is None:
        raise AclConfigError(f"address pattern {pattern!r}: the first octet cannot be a range")
    head = tuple(_octet(pattern, p) for p in parts[:ranged])
    spec = parts[ranged]
    if spec == "*":
        low, high = 0, 255
    else:
        lo, _, hi = spec.partition("-")
        low, high = _octet(pattern, lo), _octet(pattern, hi)
        if low > high:
            raise AclConfigError(f"address pattern {pattern!r}: range {spec} runs backwards")
    if any(p != "*" for p in parts[ranged + 1 :]):
        raise AclConfigError(
            f"address pattern {pattern!r}: only * may follow a range (RocketMQ would ignore "
            f"{'.'.join(parts[ranged + 1 :])} and admit the whole {'.'.join(parts[: ranged + 1])}.* block)"
        )
    return AddressPattern(pattern, head=head, low=low, high=high)
