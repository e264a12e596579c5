"""RocketMQ-format message store: synchronous, file-based, no sockets, no asyncio.

See ``docs/architecture.md`` for how the pieces fit; ``open_message_store`` (message_store.py)
builds the facade of the configured mode, ``NativeMessageStore`` or ``DLedgerMessageStore``.
"""
