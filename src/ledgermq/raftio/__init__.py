"""DLedger mode's I/O half: runs the pure Raft core (``ledgermq.raft``) between broker processes.

``ledger_storage`` puts the core's log and hard state in a DLedgerStore, ``transport``
carries ``raft.wire`` batches over the remoting layer, and ``driver`` is the asyncio
loop that ticks the core, steps it with peers' messages and carries out each Ready.
The core itself stays pure (tests/unit/test_layering.py), which is why this lives
beside it rather than inside ``raft/``.
"""
