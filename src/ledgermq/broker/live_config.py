"""Which broker settings ``UPDATE_BROKER_CONFIG`` (``mqadmin updateBrokerConfig``) may change
while the broker runs, and how a request's properties are checked.

RocketMQ stores any key it is sent and most of them only take effect after a restart, so
an operator cannot tell a live change from a silently ignored one. ledgermq applies a key
only when every place that reads it reads the broker's current config on each use; any
other key (unknown, or read once at start) refuses the whole request, naming the key, and
nothing is changed. Changes live in memory only: the broker's properties file is not
rewritten, so a restart returns to the file's values.

Live keys:

* ``brokerPermission`` (2 W, 4 R, 6 RW): sends/pulls check it per request and the broker
  registers its whole table with the name servers at once, so routes carry the new perm;
* ``longPollingEnable`` / ``shortPollingTimeMills``: read by every held pull;
* ``channelExpiredTimeout``: read by every client-expiry scan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ledgermq.broker.config import BrokerConfig


class ConfigChangeRefused(ValueError):
    """The request names a key that cannot change live, or a value that does not parse."""


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


def _perm(text: str) -> int:
    value = int(text.strip())
    if value not in (2, 4, 6):
        raise ValueError(f"{value} is not a broker permission (2 W, 4 R, 6 RW)")
    return value


def _positive(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError(f"{value} is not a positive number")
    return value


@dataclass(frozen=True, slots=True)
class LiveKey:
    field: str
    parse: Callable[[str], object]


LIVE_KEYS: dict[str, LiveKey] = {
    "brokerPermission": LiveKey("broker_permission", _perm),
    "longPollingEnable": LiveKey("long_polling_enable", _bool),
    "shortPollingTimeMills": LiveKey("short_polling_time_ms", _positive),
    "channelExpiredTimeout": LiveKey("channel_expired_timeout_ms", _positive),
}


def parse_properties(text: str) -> dict[str, str]:
    """``MixAll.string2Properties`` for what mqadmin sends: ``key=value`` lines, ``#`` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def apply_changes(config: BrokerConfig, props: dict[str, str], known_keys: set[str]) -> BrokerConfig:
    """The config with ``props`` applied; ConfigChangeRefused naming the first key that is
    unknown, restart-only or badly valued (then nothing is applied)."""
    if not props:
        raise ConfigChangeRefused("no key given")
    changes: dict[str, object] = {}
    for key, value in sorted(props.items()):
        live = LIVE_KEYS.get(key)
        if live is None:
            if key in known_keys:
                raise ConfigChangeRefused(
                    f"broker config key {key} cannot be changed at runtime (it is read only at start); "
                    f"set it in the broker's config file and restart. Live keys: {', '.join(sorted(LIVE_KEYS))}"
                )
            raise ConfigChangeRefused(f"unknown broker config key {key}; live keys: {', '.join(sorted(LIVE_KEYS))}")
        try:
            changes[live.field] = live.parse(value)
        except ValueError as exc:
            raise ConfigChangeRefused(f"broker config key {key}: bad value {value!r}: {exc}") from None
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
