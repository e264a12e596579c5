"""plain_acl.yml address patterns (RemoteAddressStrategyFactory's forms)."""

from __future__ import annotations

import pytest

from ledgermq.acl.addresses import AclConfigError, parse_address_pattern


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1", "anything"], []),
        ("*.*.*.*", ["10.0.0.1"], []),
        ("", [], ["127.0.0.1"]),
        ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2", "192.168.0.10", "garbage"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.0.12"]),
        ("10.0.0.1,10.0.0.7", ["10.0.0.1", "10.0.0.7"], ["10.0.0.2"]),
        ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1", "192.169.1.1"]),
        ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.0", "192.168.1.101"]),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.9"], ["192.167.0.1"]),
        ("10.1-20.*.*", ["10.1.0.0", "10.20.255.255"], ["10.21.0.0", "11.1.0.0"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ],
)
def test_patterns_match(pattern: str, yes: list[str], no: list[str]) -> None:
    p = parse_address_pattern(pattern)
    assert all(p.match(h) for h in yes), [h for h in yes if not p.match(h)]
    assert not any(p.match(h) for h in no), [h for h in no if p.match(h)]


def test_none_matches_nothing() -> None:
    assert not parse_address_pattern(None).match("127.0.0.1")


@pytest.mark.parametrize(
    "pattern",
    [
        "192.168.1.256",
        "192.168.0.{1,x}",
        "192.168.{1,2}.3}",
        "hostname",
        "192.168.1-10.5",  # RocketMQ ignores the 5; we refuse
        "192.168.1.100-1",  # backwards
        "192.168.1.1-300",
        "*.1.2.3",
        "192.168.1",
        "2001:db8::1-ff",  # IPv6 ranges unsupported
        "10.0.0.1,nope",
    ],
)
def test_bad_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(AclConfigError, match="address pattern"):
        parse_address_pattern(pattern)
