"""Credentials reach the client instance's transport; one instance never mixes two accounts."""

from __future__ import annotations

import asyncio

import pytest

from ledgermq.acl.signing import ACCESS_KEY, Credentials, signature_matches
from ledgermq.client.errors import MQClientError
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.protocol.command import RemotingCommand

A = Credentials("accountA1", "secretA1")
B = Credentials("accountB1", "secretB1")


def test_instance_signs_and_refuses_other_credentials() -> None:
    async def main() -> None:
        inst = ClientInstance.acquire("127.0.0.1:1", instance_name="acl-creds-test", credentials=A)
        try:
            assert inst.remoting.sign is not None
            cmd = RemotingCommand.request(11, {"topic": "T"}, b"b")
            inst.remoting.sign(cmd)
            assert cmd.ext_fields[ACCESS_KEY] == "accountA1"
            assert signature_matches(cmd.ext_fields, cmd.body, "secretA1")
            assert ClientInstance.acquire("127.0.0.1:1", instance_name="acl-creds-test", credentials=A) is inst
            await inst.release()
            with pytest.raises(MQClientError, match="other ACL credentials"):
                ClientInstance.acquire("127.0.0.1:1", instance_name="acl-creds-test", credentials=B)
            with pytest.raises(MQClientError, match="other ACL credentials"):
                ClientInstance.acquire("127.0.0.1:1", instance_name="acl-creds-test")
        finally:
            await inst.release()
        plain = ClientInstance.acquire("127.0.0.1:1", instance_name="acl-creds-test")
        assert plain.remoting.sign is None and plain is not inst
        await plain.release()

    asyncio.run(main())
