"""Transactional messages, as RocketMQ 4.9's broker does them (docs/transactions.md).

A prepared send is stored as a *half message* in RMQ_SYS_TRANS_HALF_TOPIC queue 0 (its
real topic and queue in REAL_TOPIC / REAL_QID), where no consumer of the real topic can
see it. END_TRANSACTION commits it (the real message is written from the half one) or
rolls it back; either way an *op message* (tag "d", body = the half's queue offset) in
RMQ_SYS_TRANS_OP_HALF_TOPIC marks it resolved. The master's check service walks the half
queue and asks a producer of the group about every unresolved half message old enough.

``half`` and ``ops`` are pure message shapes and bookkeeping, ``scan`` is the pure
decision of one check round, ``check_service`` runs the rounds on the master.
"""
