"""The client instance one process shares between its producers and consumers (Java's
``MQClientInstance``): the connections, heartbeats and rebalance timer, the name servers
and the topic routes they serve, and the broker requests every client makes (pulls,
offsets). Depends on nothing else of client/ but ``errors`` and ``message``.

Deliberately empty: importing a module of this package loads no other.
"""
