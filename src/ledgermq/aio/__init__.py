"""asyncio building blocks shared by servers and clients: periodic tasks (``periodic``)."""
