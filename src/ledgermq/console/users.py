"""Console users, in rocketmq-dashboard's ``users.properties`` format: one ``name=password``
line per user, ``name=password,1`` for an admin; ``#`` starts a comment. A read-only user
sees every page and changes nothing.

Passwords are compared in constant time. The file is read once at start-up: a malformed
line stops the console naming the line, and a file with no user is refused (nobody could
log in)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from ledgermq.console.settings import ConsoleSettingsError


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password: str
    admin: bool

    def __repr__(self) -> str:  # never log a password
        return f"User({self.name!r}, admin={self.admin})"


ANONYMOUS = User("", "", admin=True)  # no users file: the console is local and fully usable


def parse_users(text: str, source: str = "users file") -> dict[str, User]:
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, rest = line.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConsoleSettingsError(f"{source} line {number}: expected name=password[,1]")
        password, _, role = rest.strip().partition(",")
        role = role.strip()
        if role not in ("", "0", "1"):
            raise ConsoleSettingsError(f"{source} line {number}: the role after the comma must be 1 (admin) or 0")
        if not password:
            raise ConsoleSettingsError(f"{source} line {number}: user {name!r} has an empty password")
        if name in users:
            raise ConsoleSettingsError(f"{source} line {number}: user {name!r} is defined twice")
        users[name] = User(name, password, admin=role == "1")
    if not users:
        raise ConsoleSettingsError(f"{source}: defines no user, so nobody could log in")
    return users


def load_users(path: Path) -> dict[str, User]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConsoleSettingsError(f"--users-file {path}: {exc.strerror or exc}") from None
    return parse_users(text, f"--users-file {path}")


def check_password(users: dict[str, User], name: str, password: str) -> User | None:
    """The user if ``password`` is theirs; None otherwise (same work for unknown names)."""
    user = users.get(name)
    expected = user.password if user is not None else "\0" * 16
    ok = hmac.compare_digest(expected.encode(), password.encode())
    return user if ok and user is not None else None
