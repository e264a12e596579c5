"""Tokens of RocketMQ's SQL92 selector grammar (``SelectorParser.jj``, 4.9).

The token rules follow the JavaCC grammar, including its longest-match choice between
rules and its quirks, so that an expression means the same here as on a Java broker:

* keywords (NOT AND OR BETWEEN IN TRUE FALSE NULL IS) and identifiers ignore case;
  an identifier is ``[a-zA-Z_$][a-zA-Z0-9_$]*`` (no dots, no non-ASCII letters);
* a decimal literal is ``0`` or ``[1-9][0-9]*`` with an optional ``L``; there are no hex
  or octal integers, so ``007`` is three tokens (and a syntax error);
* floating literals are ``5.5``, ``5.``, ``.5``, ``5E10``, ``5.5e-3`` (no sign: ``-`` is
  an operator);
* strings are single-quoted, ``''`` inside stands for one quote, newlines are allowed;
* ``-- comment`` runs to the end of the line and needs that line end (at the very end of
  the text the two dashes are minus signs), ``/* comment */`` may span lines.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ledgermq.filter.errors import FilterSyntaxError, position_of


class Kind(enum.Enum):
    KEYWORD = "keyword"
    DECIMAL = "decimal literal"
    FLOAT = "floating point literal"
    STRING = "string literal"
    ID = "identifier"
    OP = "operator"
    EOF = "end of expression"


KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # as written (keywords upper-cased)
    offset: int  # index of the first character in the expression

    def describe(self) -> str:
        if self.kind is Kind.EOF:
            return "the end of the expression"
        if self.kind is Kind.KEYWORD:
            return self.text
        return f"{self.kind.value} {self.text!r}" if self.kind is not Kind.OP else f"'{self.text}'"


_SKIP = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_FLOAT = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_STRING = re.compile(r"'(?:''|[^'])*'", re.DOTALL)
_WORD = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
_OPERATORS = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with one EOF token; FilterSyntaxError on a character
    no token can start with (or an unterminated string)."""
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while True:
        while pos < end:
            skip = _SKIP.match(text, pos)
            if skip is None:
                break
            pos = skip.end()
        if pos >= end:
            tokens.append(Token(Kind.EOF, "", end))
            return tokens
        tokens.append(_next(text, pos))
        pos = tokens[-1].offset + len(tokens[-1].text)


def _next(text: str, pos: int) -> Token:
    ch = text[pos]
    if ch.isascii() and (ch.isdigit() or ch == "."):
        flt = _FLOAT.match(text, pos)
        dec = _DECIMAL.match(text, pos)
        # JavaCC takes the longest match; on a tie the rule declared first (DECIMAL) wins.
        if flt is not None and (dec is None or flt.end() > dec.end()):
            return Token(Kind.FLOAT, flt.group(), pos)
        if dec is not None:
            return Token(Kind.DECIMAL, dec.group(), pos)
    elif ch == "'":
        s = _STRING.match(text, pos)
        if s is None:
            line, column = position_of(text, pos)
            raise FilterSyntaxError(f"Unterminated string literal (at line {line}, column {column})", text, pos)
        return Token(Kind.STRING, s.group(), pos)
    else:
        w = _WORD.match(text, pos)
        if w is not None:
            word = w.group()
            if word.upper() in KEYWORDS:
                return Token(Kind.KEYWORD, word.upper(), pos)  # ASCII: same length
            return Token(Kind.ID, word, pos)
        for op in _OPERATORS:
            if text.startswith(op, pos):
                return Token(Kind.OP, op, pos)
    line, column = position_of(text, pos)
    raise FilterSyntaxError(f"Unexpected character {ch!r} (at line {line}, column {column})", text, pos)
