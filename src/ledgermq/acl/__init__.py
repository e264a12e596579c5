"""Access control as RocketMQ 4.x's plain ACL does it (``plain_acl.yml``, HMAC-SHA1 signed
requests), sans-I/O: the file model, remote-address patterns, signatures, the resources a
request needs and the allow/refuse decision. The broker wires it up in broker/acl_gate.py;
clients sign through ``Credentials`` (docs/acl.md)."""
