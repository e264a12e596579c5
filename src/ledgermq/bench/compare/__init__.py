"""``ledgermq bench compare``: ledgermq against NATS JetStream on one host, in one run."""
