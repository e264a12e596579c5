"""No two files of ledgermq import each other, directly or round a longer circle.

What counts as an import: every ``import`` statement in a file, wherever it stands. A
function-local import still makes the two modules depend on each other; putting it in a
function only hides the circle from a reader (and moves the failure from start-up to the
first call). An import under ``if TYPE_CHECKING`` never runs, but it still says that a
module knows the other's internals to type them, which is the coupling the rule is about;
the cure is cheap either way (a Protocol where the collaborator is used, or the shared
piece in a module of its own). What does not count: the implicit import of a package's
``__init__`` when one of its submodules is imported, which is how Python packages work and
not a choice a file makes.

A circle is resolved by giving the shared piece its own module or by passing collaborators
in, never by moving an import into a function."""

from __future__ import annotations

from pathlib import Path

from tests.unit.import_graph import circles, import_graph
from tests.unit.test_layering import SRC

# Circles tolerated for now (none); a stale entry fails below so it cannot linger.
TEMPORARY_ALLOWED: set[frozenset[str]] = set()


def _describe(circle: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = [f"{a} -> {b}" for a in sorted(circle) for b in sorted(graph[a] & circle)]
    return "; ".join(edges)


def test_no_module_imports_round_a_circle() -> None:
    graph = import_graph(SRC)
    found = circles(graph)
    unexpected = [c for c in found if c not in TEMPORARY_ALLOWED]
    assert not unexpected, "import circles:\n" + "\n".join(_describe(c, graph) for c in unexpected)
    stale = TEMPORARY_ALLOWED - set(found)
    assert not stale, f"no longer circles, remove them from TEMPORARY_ALLOWED: {[sorted(c) for c in stale]}"


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_check_sees_planted_circles(tmp_path: Path) -> None:
    """Each way of hiding a circle is caught; a diamond and a package's own submodules are not
    circles."""
    pkg = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            # hidden in a function
            "pkg/a.py": "from pkg.b import helper\n",
            "pkg/b.py": "def helper():\n    from pkg import a\n    return a\n",
            # under TYPE_CHECKING, three long, with a relative import
            "pkg/sub/__init__.py": "from pkg.sub import x\n",
            "pkg/sub/x.py": "from . import y\n",
            "pkg/sub/y.py": "import pkg.sub.z\n",
            "pkg/sub/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import Thing\n",
            # a diamond: no circle
            "pkg/top.py": "import pkg.left, pkg.right\n",
            "pkg/left.py": "from pkg import bottom\n",
            "pkg/right.py": "from pkg.bottom import value\n",
            "pkg/bottom.py": "value = 1\n",
        },
    )
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.x"] == {"pkg.sub.y"}
    assert sorted(sorted(c) for c in circles(graph)) == [
        ["pkg.a", "pkg.b"],
        ["pkg.sub.x", "pkg.sub.y", "pkg.sub.z"],
    ]
