"""plain_acl.yml as data: RocketMQ 4.x's PlainPermissionManager.load, made strict.

The file holds ``globalWhiteRemoteAddresses`` (address patterns whose requests pass
unchecked) and ``accounts``: ``accessKey``/``secretKey`` (each longer than 6 characters, as
RocketMQ requires), ``whiteRemoteAddress`` (requests from there pass unchecked too),
``admin``, ``defaultTopicPerm``/``defaultGroupPerm`` (DENY when absent) and
``topicPerms``/``groupPerms`` (``name=PERM`` lines). A group permission is kept under the
group's retry topic ``%RETRY%group``, which is how RocketMQ tells groups from topics when it
checks. ``dataVersion`` (written by RocketMQ's admin tools) is accepted and ignored.

Where RocketMQ silently turns a bad permission word into DENY or skips a repeated access
key, we refuse the file with an AclConfigError naming the account and entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from ledgermq.acl.addresses import AclConfigError, AddressPattern, parse_address_pattern

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3
PERM_WORDS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
RETRY_PREFIX = "%RETRY%"
KEY_MIN_LENGTH = 6  # AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: lengths must exceed it
TOP_LEVEL_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})
ACCOUNT_KEYS = frozenset(
    {
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    names = [n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) if names else ("ANY" if perm & ANY else "DENY")


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission: DENY wins; ANY needs PUB or SUB; otherwise any shared bit."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_PREFIX)


def describe_resource(resource: str) -> str:
    """``topic:X`` or ``group:G`` (PlainAccessResource.printStr)."""
    if is_group_resource(resource):
        return f"group:{resource[len(RETRY_PREFIX) :]}"
    return f"topic:{resource}"


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    white_address: AddressPattern
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    # topic -> perm and %RETRY%group -> perm; None when the account lists neither (RocketMQ
    # lets an admin without lists through on that condition alone).
    perms: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class AclConfig:
    global_white: tuple[AddressPattern, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)


def _scalar(value: Any, where: str) -> str:
    """A YAML scalar as the string RocketMQ sees after SnakeYAML and fastjson (``12345678`` is a
    number in YAML and the string "12345678" to RocketMQ)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise AclConfigError(f"{where}: {value!r} is not a plain value")


def parse_perm(word: Any, where: str) -> int:
    if word is None:
        return DENY
    text = _scalar(word, where).strip()
    try:
        return PERM_WORDS[text]
    except KeyError:
        raise AclConfigError(f"{where}: permission {text!r} is not DENY, PUB, SUB, PUB|SUB or SUB|PUB") from None


def _resource_perms(lines: Any, where: str, as_group: bool) -> dict[str, int]:
    if lines is None:
        return {}
    if not isinstance(lines, list):
        raise AclConfigError(f"{where}: expected a list of name=PERM lines")
    out: dict[str, int] = {}
    for line in lines:
        text = _scalar(line, where)
        items = [p for p in text.split("=") if p]
        if len(items) != 2 or not items[0].strip():
            raise AclConfigError(f"{where}: {text!r} is not name=PERM (for example topicA=SUB)")
        name = items[0].strip()
        out[retry_topic(name) if as_group else name] = parse_perm(items[1], f"{where} {text!r}")
    return out


def _bool(value: Any, where: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(f"{where}: {value!r} is not true or false")


def parse_account(doc: Any, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(doc, dict):
        raise AclConfigError(f"{where} is not a mapping")
    unknown = sorted(set(map(str, doc)) - ACCOUNT_KEYS)
    if unknown:
        raise AclConfigError(f"{where}: unknown keys {unknown} (known: {sorted(ACCOUNT_KEYS)})")
    access_key = _scalar(doc.get("accessKey", ""), f"{where}.accessKey") if doc.get("accessKey") is not None else ""
    secret_key = _scalar(doc.get("secretKey", ""), f"{where}.secretKey") if doc.get("secretKey") is not None else ""
    if len(access_key) <= KEY_MIN_LENGTH or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{where} (accessKey={access_key!r}): accessKey and secretKey are required and must be longer "
            f"than {KEY_MIN_LENGTH} characters"
        )
    where = f"account {access_key}"
    topics = _resource_perms(doc.get("topicPerms"), f"{where} topicPerms", as_group=False)
    groups = _resource_perms(doc.get("groupPerms"), f"{where} groupPerms", as_group=True)
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_address=parse_address_pattern(doc.get("whiteRemoteAddress")),
        admin=_bool(doc.get("admin"), f"{where} admin"),
        default_topic_perm=parse_perm(doc.get("defaultTopicPerm"), f"{where} defaultTopicPerm"),
        default_group_perm=parse_perm(doc.get("defaultGroupPerm"), f"{where} defaultGroupPerm"),
        perms={**groups, **topics} or None,  # RocketMQ parses groups first: a topic line wins a clash
    )


def parse_acl_config(doc: Any) -> AclConfig:
    """A loaded YAML document (None for an empty file) as an AclConfig; AclConfigError if invalid."""
    if doc is None:
        return AclConfig()
    if not isinstance(doc, dict):
        raise AclConfigError("plain_acl.yml must be a mapping (globalWhiteRemoteAddresses, accounts)")
    unknown = sorted(set(map(str, doc)) - TOP_LEVEL_KEYS)
    if unknown:
        raise AclConfigError(f"unknown top-level keys {unknown} (known: {sorted(TOP_LEVEL_KEYS)})")
    white = doc.get("globalWhiteRemoteAddresses") or []
    if not isinstance(white, list):
        raise AclConfigError("globalWhiteRemoteAddresses must be a list of address patterns")
    patterns = tuple(parse_address_pattern(_scalar(p, "globalWhiteRemoteAddresses")) for p in white)
    accounts_doc = doc.get("accounts") or []
    if not isinstance(accounts_doc, list):
        raise AclConfigError("accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, entry in enumerate(accounts_doc):
        account = parse_account(entry, i)
        if account.access_key in accounts:
            raise AclConfigError(f"accessKey {account.access_key!r} appears twice in accounts")
        accounts[account.access_key] = account
    return AclConfig(global_white=patterns, accounts=accounts)


def parse_acl_text(text: str | bytes) -> AclConfig:
    """plain_acl.yml's text as an AclConfig; AclConfigError for bad YAML or content."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"not valid YAML: {exc}") from None
    return parse_acl_config(doc)
