"""asyncio transport for the remoting protocol: a server dispatching by request code and a client."""
