"""Reading what a form sent: every field is checked and a bad one refused with a sentence
that names it (shown on the page), never silently replaced by a default."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from aiohttp import web


class FormError(ValueError):
    """A field the page's user must correct; the message names it."""


def text(form: Mapping[str, Any], name: str, *, required: bool = False, default: str = "") -> str:
    value = form.get(name)
    value = value.strip() if isinstance(value, str) else ""
    if required and not value:
        raise FormError(f"{name}: required")
    return value or default


def integer(form: Mapping[str, Any], name: str, *, low: int, high: int, default: int | None = None) -> int:
    raw = text(form, name)
    if not raw:
        if default is None:
            raise FormError(f"{name}: required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"{name}: {raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise FormError(f"{name}: {value} is outside {low}..{high}")
    return value


def local_time_ms(raw: str, name: str) -> int:
    """A ``datetime-local`` field (this machine's time zone) or epoch milliseconds, as epoch ms."""
    raw = raw.strip()
    if raw.isdigit():
        return int(raw)
    try:
        return int(dt.datetime.fromisoformat(raw).timestamp() * 1000)
    except ValueError:
        raise FormError(f"{name}: {raw!r} is not a time (YYYY-MM-DDTHH:MM[:SS] or epoch milliseconds)") from None


def input_time(ms: int) -> str:
    """Epoch ms as a ``datetime-local`` value (to the second)."""
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S")


def properties(raw: str) -> dict[str, str]:
    """``key=value`` lines as user properties."""
    out: dict[str, str] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise FormError(f"properties line {number}: expected key=value")
        out[key.strip()] = value.strip()
    return out


async def posted(request: web.Request) -> Mapping[str, Any]:
    return await request.post()  # already read (and CSRF-checked) by the auth middleware
