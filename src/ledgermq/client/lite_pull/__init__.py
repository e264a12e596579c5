"""The lite pull consumer (Java's ``DefaultLitePullConsumer``): background readers fill a
buffer the application polls; what to read (subscribe or assign), the progress (poll,
seek, commits) and the topic metadata watch are its parts.

Deliberately empty: the facade (``lite_pull.consumer``) is imported by ``ledgermq.client`` only.
"""
