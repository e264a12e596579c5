"""The layering contract of docs/architecture.md ("Layers present today"), checked on the source:
pure layers stay pure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ledgermq"
FORBIDDEN_IN_PURE = {"asyncio", "socket", "selectors", "ssl", "uvloop"}
PURE_PACKAGES = ["acl", "filter", "protocol", "raft", "store", "util"]
CORE_MODULES = ["errors.py", "clock.py", "config.py", "failpoints.py", "atomic_file.py"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _pure_files() -> list[Path]:
    files = [p for pkg in PURE_PACKAGES for p in sorted((SRC / pkg).rglob("*.py"))]
    return files + [SRC / m for m in CORE_MODULES]


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_pure_layers_import_no_networking(path: Path) -> None:
    bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN_IN_PURE}
    assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sorted((SRC / "protocol").rglob("*.py")), ids=lambda p: p.name)
def test_protocol_depends_only_on_core(path: Path) -> None:
    ours = {n for n in _imports(path) if n.startswith("ledgermq.")}
    allowed = ("ledgermq.protocol", "ledgermq.errors", "ledgermq.util")
    assert all(n.startswith(allowed) for n in ours), f"{path.name} imports {sorted(ours)}"


@pytest.mark.parametrize("path", sorted((SRC / "store").rglob("*.py")), ids=lambda p: p.name)
def test_store_does_not_reach_upward(path: Path) -> None:
    ours = {n for n in _imports(path) if n.startswith("ledgermq.")}
    upward = ("ledgermq.net", "ledgermq.broker", "ledgermq.ha", "ledgermq.raft", "ledgermq.client")
    assert not any(n.startswith(upward) for n in ours), f"{path.name} imports {sorted(ours)}"


@pytest.mark.parametrize("path", sorted((SRC / "filter").rglob("*.py")), ids=lambda p: p.name)
def test_filter_is_self_contained(path: Path) -> None:
    """The SQL92 filter is shared by broker and client: stdlib and itself only."""
    ours = {n for n in _imports(path) if n.startswith("ledgermq.")}
    assert all(n.startswith("ledgermq.filter") for n in ours), f"{path.name} imports {sorted(ours)}"


# The Raft core is sans-I/O and deterministic: no clock, threads, files or process state.
FORBIDDEN_IN_RAFT = FORBIDDEN_IN_PURE | {"time", "threading", "os", "subprocess", "io", "pathlib", "concurrent"}


@pytest.mark.parametrize("path", sorted((SRC / "raft").rglob("*.py")), ids=lambda p: p.name)
def test_raft_is_pure(path: Path) -> None:
    names = _imports(path)
    bad = {n for n in names if n.split(".")[0] in FORBIDDEN_IN_RAFT}
    assert not bad, f"raft/{path.name} imports {sorted(bad)}"
    ours = {n for n in names if n.startswith("ledgermq")}
    allowed = ("ledgermq.raft", "ledgermq.errors", "ledgermq.util")
    assert all(n.startswith(allowed) for n in ours), f"raft/{path.name} imports {sorted(ours)}"


@pytest.mark.parametrize("path", sorted((SRC / "raft").rglob("*.py")), ids=lambda p: p.name)
def test_raft_draws_no_unseeded_randomness(path: Path) -> None:
    """``random`` may only be used through an injected or seeded ``random.Random``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            raise AssertionError(f"raft/{path.name} imports names from random; use random.Random")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
            assert node.attr == "Random", f"raft/{path.name} calls random.{node.attr} (module-global state)"


@pytest.mark.parametrize("path", sorted((SRC / "raftio").rglob("*.py")), ids=lambda p: p.name)
def test_raftio_sits_below_the_broker(path: Path) -> None:
    """DLedger mode's I/O half uses the core, the DLedger store and remoting; the broker uses it."""
    ours = {n for n in _imports(path) if n.startswith("ledgermq.")}
    upward = ("ledgermq.broker", "ledgermq.ha", "ledgermq.client", "ledgermq.namesrv", "ledgermq.cli")
    assert not any(n.startswith(upward) for n in ours), f"raftio/{path.name} imports {sorted(ours)}"


def test_ledger_storage_needs_no_event_loop() -> None:
    names = _imports(SRC / "raftio" / "ledger_storage.py")
    bad = {n for n in names if n.split(".")[0] in FORBIDDEN_IN_PURE or n.startswith("ledgermq.net")}
    assert not bad, f"raftio/ledger_storage.py imports {sorted(bad)}"


# spark/ speaks to brokers and name servers only through the client (docs/architecture.md).
SPARK_MAY_IMPORT = (
    "ledgermq.spark",
    "ledgermq.client",
    "ledgermq.aio",
    "ledgermq.errors",
    "ledgermq.clock",
    "ledgermq.config",
    # the sink's named crash points (spark/sink.py, spark/eo_commit.py) for its fault tests:
    # failpoints is a stdlib-only core module and a point does nothing unless a test arms it
    "ledgermq.failpoints",
    # the worker's freeze of its long-lived objects (one stdlib-only module, shared with the
    # servers' start-up): spark/source.py at a worker's first task
    "ledgermq.util.long_lived",
)


def _ledgermq_imports(source: str, filename: str = "<source>") -> set[str]:
    """Every ledgermq module a source imports, function-local, TYPE_CHECKING and relative ones
    included (a relative import inside spark/ stays in spark/; ``from ledgermq import x`` names
    ``ledgermq.x``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "ledgermq")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add("ledgermq.spark")
            elif node.module == "ledgermq":
                names.update(f"ledgermq.{a.name}" for a in node.names)
            elif node.module and node.module.split(".")[0] == "ledgermq":
                names.add(node.module)
    return names


def _spark_violations(source: str) -> set[str]:
    allowed = SPARK_MAY_IMPORT
    return {n for n in _ledgermq_imports(source) if not any(n == a or n.startswith(a + ".") for a in allowed)}


def test_spark_imports_only_the_client_aio_and_core() -> None:
    files = sorted((SRC / "spark").rglob("*.py"))
    assert files
    bad = {str(p.relative_to(SRC)): sorted(v) for p in files if (v := _spark_violations(p.read_text()))}
    assert not bad, f"spark/ reaches past the client: {bad}"
    # the checker itself: allowed imports pass, each kind of planted violation is caught
    assert not _spark_violations(
        "from ledgermq.client.records import decode_record\nimport ledgermq.aio.loops\nfrom ledgermq import errors\n"
        "from .broker import BrokerSession\nimport ledgermq.spark\n"
    )
    planted = (
        "import pyarrow\nfrom ledgermq.client import Producer\n"
        "def f():\n    from ledgermq.protocol.codes import ResponseCode\n"
        "import ledgermq.net.client\nfrom ledgermq import store\nfrom ledgermq.clientele import x\n"
        "from ledgermq.config_keys import KEYS\n"
    )
    assert _spark_violations(planted) == {
        "ledgermq.protocol.codes",
        "ledgermq.net.client",
        "ledgermq.store",
        "ledgermq.clientele",
        "ledgermq.config_keys",
    }


# The whole layer order (docs/architecture.md, "Layers present today"): a package imports
# only packages of a lower rank. Packages of one rank do not import each other; the core
# modules (errors, clock, config, ...) may import one another.
LAYER_RANKS: dict[str, int] = {
    "cli": 100,
    "bench": 90,
    "chaos": 90,
    "console": 85,
    "spark": 80,
    "admin": 70,
    "client": 60,
    "broker": 50,
    "namesrv": 45,
    "controller": 42,
    "ha": 40,
    "raftio": 40,
    "testing": 35,
    "raft": 30,
    "store": 30,
    "acl": 25,
    "net": 25,
    "aio": 20,
    "filter": 20,
    "protocol": 15,
    "util": 10,
}
CORE_RANK = 5  # errors.py, clock.py, config.py, config_keys.py, failpoints.py, startup.py, atomic_file.py


def _unit(module: str) -> str | None:
    """``ledgermq.store.reput`` -> ``store``; a core module -> ``core``; not ours -> None."""
    parts = module.split(".")
    if parts[0] != "ledgermq" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYER_RANKS else "core"


def _rank(unit: str) -> int:
    return CORE_RANK if unit == "core" else LAYER_RANKS[unit]


def layer_violations(imports: dict[str, set[str]]) -> list[str]:
    """``imports``: importing unit -> the ledgermq modules it imports; the edges that point up
    or sideways."""
    bad = []
    for unit, modules in sorted(imports.items()):
        for module in sorted(modules):
            target = _unit(module)
            if target is None or target == unit or (unit == "core" and target == "core"):
                continue
            if _rank(target) >= _rank(unit):
                bad.append(f"{unit} -> {module}")
    return bad


def _package_imports() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).parts
        unit = rel[0] if len(rel) > 1 else "core"  # a top-level module is a core module
        text = path.read_text()
        names: set[str] = set()
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.update(
                    f"{node.module}.{a.name}" if node.module == "ledgermq" else node.module for a in node.names
                )
        out.setdefault(unit, set()).update(names)
    return out


def test_every_package_has_a_rank() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYER_RANKS), f"rank these in LAYER_RANKS: {sorted(packages ^ set(LAYER_RANKS))}"


def test_dependencies_point_down_the_layer_list() -> None:
    assert not layer_violations(_package_imports())
    # the checker itself catches upward and sideways edges and lets downward ones pass
    planted = {
        "store": {"ledgermq.broker.app", "ledgermq.protocol.message"},
        "broker": {"ledgermq.client.producer", "ledgermq.store"},
        "net": {"ledgermq.acl.signing"},
        "core": {"ledgermq.errors", "ledgermq.util.ratelog"},
        "client": {"ledgermq.filter", "ledgermq.aio.periodic"},
    }
    assert layer_violations(planted) == [
        "broker -> ledgermq.client.producer",
        "core -> ledgermq.util.ratelog",
        "net -> ledgermq.acl.signing",
        "store -> ledgermq.broker.app",
    ]
