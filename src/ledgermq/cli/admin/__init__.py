"""``ledgermq admin`` commands by concept; each module adds its commands to the ``admin``
group of ``ledgermq.cli.admin_cmd`` when imported (admin_cmd imports them all)."""
