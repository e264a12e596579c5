"""RocketMQ-format message store: synchronous, file-based, no sockets, no asyncio.

See ``docs/architecture.md`` for how the pieces fit; ``MessageStore`` is the facade.
"""
