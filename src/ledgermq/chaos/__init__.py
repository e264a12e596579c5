"""``ledgermq chaos``: a seeded fault-testing harness (in the spirit of openmessaging/openchaos).

layout (processes of a broker group) -> proxy (a TCP link that can be cut) -> faults (what
is injected, on a seeded schedule) -> workload (our producer, every attempt recorded) ->
checker (read back from every broker, verdicts) -> report (table and JSON), tied together
by runner. See docs/chaos.md.
"""
