"""``ledgermq admin`` commands by concept; each module lists its commands in ``COMMANDS`` and
``ledgermq.cli.admin_cmd`` adds them to the ``admin`` group. ``plumbing`` holds what they share."""
