"""No class inherits a method only to refuse it.

A subclass whose override of an inherited method does nothing but raise (``raise
StoreError("not in this mode")``, ``raise NotImplementedError``) is not the kind of thing
its parent is: every caller holding the parent's type may call the method and fail at run
time. The store once had exactly that (DLedger mode's commit log inherited the native
``append`` and ``truncate_after(offset)`` to refuse them); now each mode has its own class
and shares code by composition or through a base whose methods mean the same in every
subclass. This test imports every module of ``ledgermq`` and checks every class defined
there; it also proves itself on planted classes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Callable, Iterable, Iterator

import ledgermq

# Modules that need an optional extra (pyspark, pyarrow) to import; checked when it is installed.
OPTIONAL = ("ledgermq.spark",)


def _only_raises(func: Callable[..., object]) -> bool:
    """Whether ``func``'s body (after its docstring) is a single ``raise``."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return False
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _functions(cls: type) -> Iterator[tuple[str, Callable[..., object]]]:
    for name, attr in vars(cls).items():
        if isinstance(attr, staticmethod | classmethod):
            attr = attr.__func__
        elif isinstance(attr, property):
            attr = attr.fget
        if inspect.isfunction(attr):
            yield name, attr


def refusals(classes: Iterable[type]) -> list[str]:
    """``Class.method (refuses Base.method)`` for every override that only raises."""
    found: list[str] = []
    for cls in classes:
        for name, func in _functions(cls):
            parent = next((base for base in cls.__mro__[1:] if name in vars(base)), None)
            if parent is None or parent is object or not _only_raises(func):
                continue
            found.append(f"{cls.__module__}.{cls.__qualname__}.{name} (refuses {parent.__qualname__}.{name})")
    return found


def _ledgermq_classes() -> Iterator[type]:
    for info in pkgutil.walk_packages(ledgermq.__path__, "ledgermq."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            if info.name.startswith(OPTIONAL):
                continue
            raise
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                yield obj


def test_no_class_refuses_a_method_it_inherits() -> None:
    found = refusals(_ledgermq_classes())
    assert not found, f"overrides that only raise (give the mode its own class): {found}"


def test_the_check_sees_a_planted_refusal() -> None:
    class Log:
        def append(self, data: bytes) -> int:
            return len(data)

        def read(self, offset: int) -> bytes:
            return b""

    class RaftLog(Log):
        def append(self, data: bytes) -> int:
            """Not in this mode."""
            raise RuntimeError("not in this mode: entries are appended by index")

        def read(self, offset: int) -> bytes:  # a real override is fine
            return b"entry"

    class Checks:
        @staticmethod
        def checked() -> None:
            return None

    class Unchecked(Checks):
        @staticmethod
        def checked() -> None:
            raise NotImplementedError

    found = refusals([Log, RaftLog, Checks, Unchecked])
    assert len(found) == 2, found
    assert "RaftLog.append (refuses" in found[0] and "Log.append)" in found[0], found
    assert "Unchecked.checked (refuses" in found[1], found
