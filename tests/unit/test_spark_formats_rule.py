"""spark/ takes the formats it shares with the brokers from the client, never a copy.

The Spark source decodes stored records itself (column by column into Arrow) and acts on
pull answers, so it needs the record layout and the pull statuses. Both have one home:
the layout is ``protocol.record_layout``, which the client publishes as
``client.records`` (``V4_FIELDS``, ``V4_HEAD``, ...); the statuses are the client's
``PullStatus``. A copy in spark/ would decode fine until the day the two drifted apart.

What this refuses in spark/:

* a ``struct`` of its own (records are read with the client's ``V4_HEAD`` and
  ``TOTALSIZE``), except in modules listed in ``OWN_FORMATS`` with the format they own;
* a table of field places: a literal collection whose entries are tuples holding a name
  and integers (``("qoff", 20, 8)``), in place of the client's ``V4_FIELDS``;
* a name for a record field or size (``..._POS``, ``MAGIC``, ``SYSFLAG``, ``TOTAL``,
  ``HEAD``, ``BODY``, ``HOST``, ``V4``/``V6`` in it) bound to a number literal or to
  arithmetic on one (``MIN_TOTAL = V4_BODY + 3``, ``head = 88 + ...``): an alias of the
  client's name is fine;
* a pull status of its own: a class with a member named as one of ``PullStatus``'s, or a
  string literal spelling one (``status == "FOUND"``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ledgermq.client.instance.pull_api import PullStatus
from tests.unit.test_layering import SRC

OWN_FORMATS = {
    "half_set.py": "the half-message set's blob header (a length) is the Spark sink's own format, written "
    "and read only by spark/",
}
PULL_STATUS_NAMES = {s.name for s in PullStatus} | {str(s.value) for s in PullStatus}
RECORD_NAME = re.compile(r"(_POS|MAGIC|SYSFLAG|TOTAL|HEAD|BODY|HOST|V4|V6)", re.IGNORECASE)


def format_copies(source: str, filename: str = "<source>", own_format: bool = False) -> list[str]:
    """``line: what`` for every format spark/ should take from the client instead."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        line = getattr(node, "lineno", 0)
        if not own_format and _uses_struct(node):
            found.append((line, "a struct of its own"))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) and _is_place_table(node):
            found.append((line, "a table of field places"))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and (name := _record_constant(node)):
            found.append((line, f"a record constant {name}"))
        elif isinstance(node, ast.ClassDef) and (members := _status_members(node)):
            found.append((line, f"a pull status class {node.name} ({', '.join(sorted(members))})"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in PULL_STATUS_NAMES:
            found.append((line, f"a pull status spelled {node.value!r}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def _uses_struct(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "struct" for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.module == "struct"


def _is_place_table(node: ast.Tuple | ast.List | ast.Set | ast.Dict) -> bool:
    entries = node.values if isinstance(node, ast.Dict) else node.elts
    places = [e for e in entries if isinstance(e, ast.Tuple) and _ints(e)]
    keyed = isinstance(node, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys
    )
    named = all(any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in e.elts) for e in places)
    return len(places) >= 2 and len(places) == len(entries) and (keyed or named)


def _ints(node: ast.AST) -> list[int]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)
    ]


def _record_constant(node: ast.Assign | ast.AnnAssign) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = [t.id for t in targets if isinstance(t, ast.Name)]
    if node.value is None or not _offset_arithmetic(node.value):
        return None
    return next((n for n in names if RECORD_NAME.search(n)), None)


def _offset_arithmetic(node: ast.expr) -> bool:
    """A number literal as the value, or as an operand of its arithmetic (``88``,
    ``V4_BODY + 3``, ``88 + (12 if v6 else 0)``); what calls are given is theirs."""
    if _is_int(node):
        return True
    if isinstance(node, ast.BinOp):
        return (
            _is_int(node.left) or _is_int(node.right) or _offset_arithmetic(node.left) or _offset_arithmetic(node.right)
        )
    if isinstance(node, ast.IfExp):
        return _offset_arithmetic(node.body) or _offset_arithmetic(node.orelse)
    return False


def _is_int(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _status_members(node: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            members.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            members.add(stmt.target.id)
    return members & PULL_STATUS_NAMES


def test_spark_copies_no_record_format_or_pull_status() -> None:
    files = sorted((SRC / "spark").rglob("*.py"))
    assert files
    bad = {}
    for path in files:
        rel = path.relative_to(SRC / "spark").as_posix()
        if found := format_copies(path.read_text(), rel, own_format=rel in OWN_FORMATS):
            bad[rel] = found
    assert not bad, f"spark/ keeps its own copy of a format the client owns: {bad}"


def test_every_own_format_is_a_module_with_a_struct() -> None:
    for rel in OWN_FORMATS:
        assert "import struct" in (SRC / "spark" / rel).read_text(), f"OWN_FORMATS lists {rel}, which needs none"


def test_the_check_sees_planted_copies(tmp_path: Path) -> None:
    planted = tmp_path / "layout.py"
    planted.write_text(
        "import enum\n"
        "import struct\n"
        "from ledgermq.client import records as R\n"
        "V4 = struct.Struct('>ii12xqqiq8xq4sii8xi')\n"
        "MIN_TOTAL: int = V4.size + 3\n"
        "FIELDS = (('qoff', 20, 8), ('phys', 28, 8))\n"
        "PLACES = {'magic': (4, 4), 'sysflag': (36, 4)}\n"
        "class Status(enum.Enum):\n"
        "    FOUND = 'FOUND'\n"
        "    NO_NEW_MSG = 1\n"
        "def gone(status, sysflag, v6):\n"
        "    head = 88 + (12 if v6 else 0)\n"
        "    return status.name == 'OFFSET_ILLEGAL'\n"
    )
    assert format_copies(planted.read_text()) == [
        "2: a struct of its own",
        "5: a record constant MIN_TOTAL",
        "6: a table of field places",
        "7: a table of field places",
        "8: a pull status class Status (FOUND, NO_NEW_MSG)",
        "9: a pull status spelled 'FOUND'",
        "12: a record constant head",
        "13: a pull status spelled 'OFFSET_ILLEGAL'",
    ]
    assert format_copies("import struct\n", own_format=True) == []
    # what spark/ may write: the client's names, aliases of them, tables of names, its own numbers
    allowed = (
        "from ledgermq.client.records import V4_FIELDS, V4_HEAD\n"
        "from ledgermq.client.instance.pull_api import PullStatus\n"
        "_MAGIC = R.MESSAGE_MAGIC_CODE\n"
        "GATHERED = (('qoff', 'queueOffset'), ('phys', 'physicalOffset'))\n"
        "FIELDS = tuple((c, *V4_FIELDS[n]) for c, n in GATHERED)\n"
        "BATCH_ROWS = 4096\n"
        "BACKOFF = (0.05, 1.0)\n"
        "totals = pc.subtract(edges.slice(1), pos)\n"
        "header = {'offsets': 1} if i == 0 else {}\n"
        "def found(s):\n"
        "    return s is PullStatus.FOUND\n"
    )
    assert format_copies(allowed) == []
