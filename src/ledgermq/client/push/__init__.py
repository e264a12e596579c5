"""The push consumer (Java's ``DefaultMQPushConsumer``): one long-polling pull loop per
assigned queue, a consume service (concurrently or orderly) calling the listener, and the
answers to the brokers' requests about the consumer.

Deliberately empty: the facade (``push.consumer``) is imported by ``ledgermq.client`` only.
"""
