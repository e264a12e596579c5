"""The allow/refuse decision for one request (PlainPermissionManager.validate), in order:

1. the peer matches a ``globalWhiteRemoteAddresses`` pattern: allowed;
2. no AccessKey, or one no account has: refused;
3. the peer matches the account's ``whiteRemoteAddress``: allowed (no signature or
   permission check, as RocketMQ does);
4. the Signature is not the one the account's secret gives: refused;
5. a send to RMQ_SYS_TRACE_TOPIC (message trace): allowed;
6. an admin-only request from a non-admin account: refused;
7. an admin account with no topic or group lists: allowed; otherwise every resource the
   request needs is checked against the account's line for it, else its default for topics
   or groups: refused at the first one lacking the permission.

Refusal reasons follow RocketMQ's AclException messages, except that a missing permission
names the permission it lacks ("No PUB permission for topic:orders") where RocketMQ says
"No default permission for ...".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ledgermq.acl.model import PUB, AclConfig, check_permission, describe_resource, is_group_resource, perm_name
from ledgermq.acl.resources import needed_access
from ledgermq.acl.signing import ACCESS_KEY, signature_matches
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.codes import request_name

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    access_key: str | None = None


ALLOWED = Decision(True)


def decide(config: AclConfig, code: int, ext: Mapping[str, str], body: bytes, host: str) -> Decision:
    """May the peer at ``host`` (no port) make this request? Pure: no clock, no I/O."""
    if any(p.match(host) for p in config.global_white):
        return ALLOWED
    access_key = ext.get(ACCESS_KEY)
    if access_key is None:
        return Decision(False, "No accessKey is configured")
    account = config.accounts.get(access_key)
    if account is None:
        return Decision(False, f"No acl config for {access_key}", access_key)
    if account.white_address.match(host):
        return Decision(True, access_key=access_key)
    if not signature_matches(ext, body, account.secret_key):
        return Decision(False, f"Check signature failed for accessKey={access_key}", access_key)
    try:
        needed = needed_access(code, ext, body)
    except RemoteProtocolError as exc:
        return Decision(False, f"cannot tell what {request_name(code)} needs: {exc}", access_key)
    if needed.resources.get(TRACE_TOPIC) == PUB:
        return Decision(True, access_key=access_key)
    if needed.admin and not account.admin:
        return Decision(
            False,
            f"Need admin permission for request code={code} ({request_name(code)}), but accessKey={access_key} is not",
            access_key,
        )
    if account.perms is None and account.admin:
        return Decision(True, access_key=access_key)
    owned = account.perms or {}
    for resource, perm in needed.resources.items():
        group = is_group_resource(resource)
        have = owned.get(resource)
        if have is None:
            have = account.default_group_perm if group else account.default_topic_perm
        if not check_permission(perm, have):
            return Decision(
                False,
                f"No {perm_name(perm)} permission for {describe_resource(resource)} (accessKey={access_key})",
                access_key,
            )
    return Decision(True, access_key=access_key)
