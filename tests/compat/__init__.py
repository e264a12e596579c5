"""Compatibility tests: the Apache RocketMQ C++ client (``rocketmq`` wheel) against a real name server and broker.

Every C++ client scenario runs in a child Python process (``cpp_client.py``) because the client runs native
threads inside its process and may log or crash at teardown; the tests only see the JSON it prints.
"""
