"""Golden-transcript tests in the style of cockroachdb/datadriven (used by etcd-io/raft).

A file is a sequence of blocks; ``#`` lines and blank lines between blocks are kept
as they are::

    # a comment
    command arg key=value
    ----
    expected output, one or more lines, no blank lines

Set ``LEDGERMQ_REWRITE_GOLDEN=1`` to write the actual outputs back into the files
instead of comparing; review the diff before committing it, since a rewrite accepts
whatever the code now does.
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REWRITE_ENV = "LEDGERMQ_REWRITE_GOLDEN"
SEPARATOR = "----"


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: tuple[str, ...]
    kv: dict[str, str] = field(default_factory=dict)
    where: str = ""
    """``file:line`` of the command, for error messages."""

    def get(self, key: str, default: str) -> str:
        return self.kv.get(key, default)

    def flag(self, key: str, default: bool) -> bool:
        value = self.kv.get(key)
        return default if value is None else value.lower() in ("1", "true", "yes", "on")


@dataclass(slots=True)
class _Block:
    text: list[str]
    """Comment and blank lines before the command."""
    line: str
    lineno: int
    expected: list[str]


def parse_command(line: str, where: str = "") -> Command:
    words = shlex.split(line)
    if not words:
        raise ValueError(f"{where}: empty command")
    args = tuple(w for w in words[1:] if "=" not in w)
    kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    return Command(words[0], args, kv, where)


def _parse(path: Path) -> tuple[list[_Block], list[str]]:
    lines = path.read_text().splitlines()
    blocks: list[_Block] = []
    pending: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            pending.append(line)
            i += 1
            continue
        lineno = i + 1
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise ValueError(f"{path}:{lineno}: expected {SEPARATOR!r} after the command")
        i += 2
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append(_Block(pending, line, lineno, expected))
        pending = []
    return blocks, pending


def run_file(path: Path, handler: Callable[[Command], str], rewrite: bool | None = None) -> None:
    """Run every command of ``path`` through ``handler`` and compare (or rewrite) the outputs."""
    if rewrite is None:
        rewrite = os.environ.get(REWRITE_ENV, "") not in ("", "0")
    blocks, trailer = _parse(path)
    out: list[str] = []
    for block in blocks:
        where = f"{path.name}:{block.lineno}"
        actual = handler(parse_command(block.line, where)).rstrip("\n").splitlines() or ["ok"]
        if any(not line.strip() for line in actual):
            raise ValueError(f"{where}: output of {block.line!r} has a blank line, which the format cannot hold")
        if not rewrite and actual != block.expected:
            diff = "\n".join(difflib.unified_diff(block.expected, actual, "expected", "actual", lineterm=""))
            raise AssertionError(f"{where}: output of {block.line!r} differs (set {REWRITE_ENV}=1 to accept):\n{diff}")
        out += [*block.text, block.line, SEPARATOR, *actual]
    if rewrite:
        path.write_text("\n".join([*out, *trailer]).rstrip("\n") + "\n")
