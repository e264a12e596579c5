"""Master-slave commit-log replication on RocketMQ 4.x's HA wire protocol.

``codec`` and ``session`` are pure (bytes and decisions, time passed in); ``master``
and ``slave`` drive them with asyncio sockets and the message store.
"""
