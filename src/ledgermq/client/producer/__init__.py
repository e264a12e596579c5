"""The producer (Java's ``DefaultMQProducer``) and the transaction producer, with what they
send through: message preparation and ids, queue selection and the latency fault
strategy, the retries, asynchronous sends and following a moved master.

Deliberately empty: importing a module of this package loads no other, and the facades
(``producer.producer``, ``producer.transaction``) are imported by the package
``ledgermq.client`` only.
"""
