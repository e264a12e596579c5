"""Broker request processors, one module per domain; each processor is a small async function.

``PROCESSORS`` in each module maps request codes to ``async def (broker, ctx, cmd)``;
``app.py`` binds them to the server. Processors never import each other.
"""
