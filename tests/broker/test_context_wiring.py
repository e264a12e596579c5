"""The broker context is wired from typed services (issue: the house, second pass).

Processors reach every service through a typed field of ``Broker``; nothing is looked up
by name in a dict and no callback is patched onto the context from outside. The check
reads the dataclass's own annotations, so a new ``extras: dict[str, object]`` or
``something: Callable[...] | None = None`` field fails here, and the planted examples
show the check would see one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ledgermq.broker.context import Broker


def _service_locator_fields(cls: type[Any]) -> list[str]:
    """Fields typed as a name-keyed dict or as a bare callable: a lookup or a patched hook."""
    bad = []
    for f in dataclasses.fields(cls):
        text = str(f.type).replace(" ", "")
        if text.startswith("dict[str,") or "Callable[" in text:
            bad.append(f.name)
    return bad


def test_the_broker_context_has_no_lookup_dict_and_no_patched_callbacks() -> None:
    assert _service_locator_fields(Broker) == []


def test_the_check_sees_a_planted_lookup_dict_and_a_patched_callback() -> None:
    @dataclasses.dataclass
    class Planted:
        extras: dict[str, object]
        register_now: Callable[[], None] | None = None  # noqa: F821 (only the annotation's text is read)

    assert _service_locator_fields(Planted) == ["extras", "register_now"]
