"""Name server addresses as users give them, defined once for the client and the admin
tools: Java's ``namesrvAddr`` (``"a:9876;b:9876"``) or a list. Pure."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["split_namesrv_addrs"]


def split_namesrv_addrs(addrs: str | Sequence[str]) -> list[str]:
    """``"a:9876;b:9876"`` or a list -> addresses, blanks dropped."""
    items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    return [a.strip() for a in items if a and a.strip()]
