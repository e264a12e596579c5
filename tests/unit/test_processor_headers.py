"""Processors read request headers only through the typed header classes (protocol/headers_*.py),
so a processor never parses a header string again.

A processor is recognised by what it is, wherever it lives: a function taking a
``RequestContext`` and a ``RemotingCommand`` (mypy --strict makes every processor spell its
parameter types). Inside one, the request's ``ext_fields`` is never read. Modules of
processors (broker/processors/, namesrv/processors.py, and any module that defines one)
import no string helper (field, opt_field, int_field, bool_field); the processor packages
read no ``.ext_fields`` at all (an answer's extFields from another server included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_layering import SRC

PROCESSOR_FILES = [*sorted((SRC / "broker" / "processors").glob("*.py")), SRC / "namesrv" / "processors.py"]
STRING_HELPERS = {"field", "opt_field", "int_field", "bool_field"}


def _processors(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            types = [ast.unparse(a.annotation).split(".")[-1] for a in node.args.args if a.annotation]
            if "RequestContext" in types and "RemotingCommand" in types:
                found.append(node)
    return found


def _request_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if a.annotation and ast.unparse(a.annotation).endswith("RemotingCommand")}


def processor_violations(source: str) -> list[str]:
    """What a module with processors does against the rule (nothing for a module without)."""
    tree = ast.parse(source)
    processors = _processors(tree)
    if not processors:
        return []
    found = _helper_imports(tree)
    for fn in processors:
        requests = _request_params(fn)
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "ext_fields"
                and isinstance(node.value, ast.Name)
                and node.value.id in requests
            ):
                found.append(f"line {node.lineno}: {fn.name} reads {node.value.id}.ext_fields")
    return found


def _helper_imports(tree: ast.Module) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ledgermq.protocol.headers":
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in STRING_HELPERS]
        elif isinstance(node, ast.Attribute) and node.attr in STRING_HELPERS and _is_headers_module(node.value):
            found.append(f"line {node.lineno}: calls headers.{node.attr}")
        elif isinstance(node, ast.Import) and any(a.name == "ledgermq.protocol.headers" for a in node.names):
            found.append(f"line {node.lineno}: imports ledgermq.protocol.headers as a module")
    return found


def strict_violations(source: str) -> list[str]:
    """The processor packages: no string helper and no ``.ext_fields`` anywhere in the file."""
    tree = ast.parse(source)
    found = _helper_imports(tree)
    found += [
        f"line {node.lineno}: reads .ext_fields"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "ext_fields"
    ]
    return found


def _is_headers_module(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("headers", "H")


@pytest.mark.parametrize("path", PROCESSOR_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_processor_packages_use_typed_headers_only(path: Path) -> None:
    assert not strict_violations(path.read_text()), f"{path.relative_to(SRC)}: {strict_violations(path.read_text())}"


def test_every_processor_anywhere_uses_typed_headers() -> None:
    bad = {}
    count = 0
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        count += len(_processors(ast.parse(text)))
        if found := processor_violations(text):
            bad[str(path.relative_to(SRC))] = found
    assert not bad, f"processors reading header strings: {bad}"
    assert count > 20  # the recognition itself still finds the processors


def test_the_checks_see_planted_violations(tmp_path: Path) -> None:
    """Each banned form is reported, in a processor package file and in a processor that
    lives anywhere else; a non-processor reading a response's extFields is not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ledgermq.protocol.headers import field, MissingField\n"
        "import ledgermq.protocol.headers\n"
        "def f(cmd):\n"
        "    return cmd.ext_fields.get('topic'), headers.int_field(cmd, 'queueId')\n"
    )
    assert len(strict_violations(bad.read_text())) == 4
    elsewhere = (
        "from ledgermq.net.server import RequestContext\n"
        "from ledgermq.protocol.command import RemotingCommand\n"
        "class Check:\n"
        "    async def process(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:\n"
        "        ext = request.ext_fields\n"
        "        return request.response(0, ext_fields={'group': ext['group']})\n"
        "    async def ask(self, client, cmd: RemotingCommand) -> str:\n"
        "        return (await client.invoke(cmd)).ext_fields['selfId'] + cmd.ext_fields['x']\n"
    )
    assert processor_violations(elsewhere) == ["line 5: process reads request.ext_fields"]
    assert PROCESSOR_FILES and all(p.exists() for p in PROCESSOR_FILES)
