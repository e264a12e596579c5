"""Where a delivered timer came from, carried in the delivered message itself.

Every message the timer service writes (a due timer to its topic, a rolled one back into
the wheel) carries the property ``LEDGERMQ_TIMER_FROM`` = ``"<slot ms>,<queue offset>,
<commit-log offset>"``: the wheel slot the master was delivering, and the consume-queue
offset (in ``rmq_sys_wheel_timer`` queue 0) and commit-log offset of the timer record it
delivered. The message is replicated like any other, so every replica learns, record by
record and in order, how far the master's delivery got: a slave or DLedger follower that
takes over skips what the old master is known to have delivered instead of repeating one
or two slave-sync intervals of it (docs/timers.md, "Failover and duplicates").

Both offsets are the same on every replica (the commit log is copied byte for byte), the
slot is the master's. A property any producer could set is only believed when the
follower's own consume queue holds that timer record at that queue offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.protocol.properties import get_property

DELIVERED_FROM = "LEDGERMQ_TIMER_FROM"


@dataclass(frozen=True, slots=True, order=True)
class DeliveredFrom:
    slot_ms: int
    queue_offset: int
    phy: int

    def encode(self) -> str:
        return f"{self.slot_ms},{self.queue_offset},{self.phy}"

    @classmethod
    def decode(cls, text: str) -> DeliveredFrom | None:
        parts = text.split(",")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))


def find_in(properties_text: str) -> DeliveredFrom | None:
    """The value in a stored record's properties text, if any; one substring search when
    absent, which is what nearly every record is."""
    if DELIVERED_FROM not in properties_text:
        return None
    value = get_property(properties_text, DELIVERED_FROM)
    return DeliveredFrom.decode(value) if value is not None else None
