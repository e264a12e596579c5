"""TLS on every link: RocketMQ's settings, contexts reloaded from disk, TLS-aware accept and connect."""
