"""How a producer follows a broker group's master when it moves (pure settings).

A DLedger group elects a new leader within about a second and registers it as the
group's master (brokerId 0); a master-slave group's master may be replaced by hand. The
producer notices in two ways, both governed by ``FailoverSettings``:

* **a stalled attempt**: a send in flight for ``stall_after`` seconds makes the producer
  look up the topic's route again (every ``route_poll_interval`` while it keeps waiting);
  once the route names another master address for the attempt's broker group, the attempt
  is abandoned (``MasterMovedError``, outcome unknown) and the send is made again on the
  same queue, now served by the new master, within the same call and send timeout. A
  stopped (SIGSTOP) or hung master otherwise answers nothing and resets nothing, and
  every send to it would wait its whole timeout.
* **a back-off between retries** after an answer that means "not the master here"
  (SERVICE_NOT_AVAILABLE) or an unreachable master, when the next attempt would go to the
  same broker group again: ``backoff_initial`` doubling to ``backoff_max``, never more
  than half the time the send has left, ended early as soon as the route names a new
  master. Java retries at once, and its retries are spent within milliseconds, before the
  route shows the new master.
* **no master in the route** (the old one gone, the new one not yet registered): a send
  waits for one, up to half the time it has left, instead of failing at once
  (NoRouteError, or an attempt spent on "no master address"): nothing was sent yet.

Route lookups for both are shared: one lookup per topic at a time, at most one every
``route_poll_interval``, whatever the number of waiting sends. ``enabled=False`` gives
the plain RocketMQ 4.9.7 behaviour (no watching, retries at once).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FailoverSettings:
    """``Producer(..., failover=FailoverSettings(stall_after=1.0))``; defaults suit a DLedger
    group with an 800 ms election timeout."""

    enabled: bool = True
    stall_after: float = 0.5  # seconds an attempt may be in flight before the route is checked
    route_poll_interval: float = 0.2  # at least this long between route lookups of one topic
    backoff_initial: float = 0.2  # the first back-off between retries on the same broker group
    backoff_max: float = 1.0

    def __post_init__(self) -> None:
        if self.stall_after <= 0 or self.route_poll_interval <= 0:
            raise ValueError("stall_after and route_poll_interval must be positive")
        if self.backoff_initial < 0 or self.backoff_max < self.backoff_initial:
            raise ValueError("need 0 <= backoff_initial <= backoff_max")

    def backoff(self, previous: int, remaining: float) -> float:
        """The pause before a retry after ``previous`` back-offs of this send, leaving at
        least half of ``remaining`` (the send's time left) to the attempts."""
        if not self.enabled:
            return 0.0
        delay = min(self.backoff_max, self.backoff_initial * float(2**previous))
        return max(0.0, min(delay, remaining / 2))


DISABLED = FailoverSettings(enabled=False)
