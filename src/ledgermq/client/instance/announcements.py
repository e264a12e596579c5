"""Which subscriptions each broker has from our heartbeats, so a pull carries its
subscription only when the broker may not have it yet.

RocketMQ's push consumer pulls without its subscription (``postSubscriptionWhenPull`` is
false): the broker filters with the one the group's heartbeat registered, and refuses a
pull that names a newer version than it holds (SUBSCRIPTION_NOT_LATEST) or a topic it has
none for (SUBSCRIPTION_NOT_EXIST). A pull therefore waits on the heartbeat after every
change, and a broker that restarted refuses pulls until the next heartbeat, 30 s later.
Here a heartbeat a broker accepted records the versions it carried; a pull to that broker
whose version is recorded goes without the subscription, any other carries it (the
SUBSCRIPTION flag), and a refusal or a lost connection forgets the broker's record. The
steady state is Java's (no subscription on the wire, no re-parse on the broker) without
the windows in which Java's pulls are refused.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Announcements", "versions_in_heartbeat"]

Key = tuple[str, str]  # (consumer group, topic)


def versions_in_heartbeat(consumer_data: Iterable[Mapping[str, Any]]) -> dict[Key, int]:
    """The (group, topic) -> subVersion a heartbeat's ``consumerDataSet`` announces."""
    out: dict[Key, int] = {}
    for consumer in consumer_data:
        group = str(consumer["groupName"])
        for sub in consumer.get("subscriptionDataSet") or ():
            out[(group, str(sub["topic"]))] = int(sub["subVersion"])
    return out


class Announcements:
    """Per broker address: the subscription versions its last accepted heartbeat carried."""

    def __init__(self) -> None:
        self._known: dict[str, dict[Key, int]] = {}

    def accepted(self, addr: str, versions: Mapping[Key, int]) -> None:
        """The broker at ``addr`` answered SUCCESS to a heartbeat carrying ``versions``.

        As the broker does (``updateSubscription``): a topic the heartbeat lacks is dropped,
        and a topic's version never goes back, so a slower, older heartbeat answered after
        a newer one does not lower it."""
        before = self._known.get(addr, {})
        self._known[addr] = {key: max(version, before.get(key, version)) for key, version in versions.items()}

    def forget(self, addr: str) -> None:
        """The broker refused a pull for want of our subscription, or the connection broke
        (it may have restarted and lost every heartbeat)."""
        self._known.pop(addr, None)

    def holds(self, addr: str, group: str, topic: str, version: int) -> bool:
        """Whether the broker has the group's subscription of ``topic`` at ``version`` or newer."""
        known = self._known.get(addr)
        if known is None:
            return False
        held = known.get((group, topic))
        return held is not None and held >= version
