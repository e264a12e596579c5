"""The golden-transcript runner: comparison, rewrite, and its refusal of ambiguous output."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.testing.datadriven import Command, parse_command, run_file

SCRIPT = """# leading comment
echo a b k=v
----
old

# between blocks
echo c
----
c
"""


def echo(cmd: Command) -> str:
    return " ".join([*cmd.args, *(f"{k}={v}" for k, v in sorted(cmd.kv.items()))])


def test_mismatch_names_the_line_and_shows_a_diff(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(SCRIPT)
    with pytest.raises(AssertionError, match=r"t.txt:2.*\n.*\n.*\n.*\n-old\n\+a b k=v"):
        run_file(path, echo, rewrite=False)


def test_rewrite_keeps_comments_and_fixes_outputs(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(SCRIPT)
    run_file(path, echo, rewrite=True)
    assert path.read_text() == SCRIPT.replace("old", "a b k=v")
    run_file(path, echo, rewrite=False)


def test_blank_output_lines_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("x\n----\nok\n")
    with pytest.raises(ValueError, match="blank line"):
        run_file(path, lambda _: "a\n\nb", rewrite=True)


def test_parse_command() -> None:
    cmd = parse_command('propose n0 "two words" drop=true')
    assert (cmd.name, cmd.args, cmd.kv) == ("propose", ("n0", "two words"), {"drop": "true"})
    assert cmd.flag("drop", False) and cmd.get("x", "d") == "d"
