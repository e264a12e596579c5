"""``ledgermq cluster up``'s parts: the port check, the supervisor and the banner."""
