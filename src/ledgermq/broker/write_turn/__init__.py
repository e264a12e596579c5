"""The broker's write turn (docs/architecture.md, "The write turn"): the waits table
(waits.py, pure), the inbox other threads post into (inbox.py) and the end-of-turn step
(turn.py) that dispatches, pumps replication, releases waits and writes answers."""

from ledgermq.broker.write_turn.inbox import Facts, Inbox
from ledgermq.broker.write_turn.turn import FixedReplication, Replication, ReplicationSource, WriteTurn
from ledgermq.broker.write_turn.waits import Need, Wait, Waits

__all__ = [
    "Facts",
    "FixedReplication",
    "Inbox",
    "Need",
    "Replication",
    "ReplicationSource",
    "Wait",
    "Waits",
    "WriteTurn",
]
