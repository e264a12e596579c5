"""What the push and the lite pull consumer share: their settings, subscriptions and
filters, queue allocation, the rebalance, process queues and offset stores, the start-up
check of a group's subscriptions, and how these parts are wired when a consumer starts.
Nothing here knows either consumer's facade.

Deliberately empty: importing a module of this package loads no other.
"""
