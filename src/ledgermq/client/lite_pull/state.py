"""What the lite pull consumer's parts share and see change, handed to each of them
explicitly: the settings (frozen), the clock, the lifecycle and, once started, the
consumer's client instance, offset store and rebalance.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.client.consumer.parts import ConsumerParts
from ledgermq.client.errors import ClientStateError
from ledgermq.client.lite_pull.settings import LitePullSettings
from ledgermq.clock import Clock

__all__ = ["LitePullState"]


@dataclass(eq=False)
class LitePullState:
    """One lite pull consumer's shared, changing state; its settings never change."""

    settings: LitePullSettings
    clock: Clock
    lifecycle: str = "created"
    parts: ConsumerParts | None = None
    start_ms: int = 0

    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def running(self) -> bool:
        return self.lifecycle == "running"

    @property
    def started(self) -> ConsumerParts:
        """The parts of the started consumer; ClientStateError before start."""
        if self.parts is None:
            raise ClientStateError(f"the consumer is {self.lifecycle}; start it first")
        return self.parts
