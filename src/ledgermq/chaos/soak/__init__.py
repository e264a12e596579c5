"""``ledgermq chaos soak``: hours of mixed, checked load with a seeded fault every few
minutes, the brokers' memory and descriptors watched for growth (docs/chaos.md, "Soak")."""
