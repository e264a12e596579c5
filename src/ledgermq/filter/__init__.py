"""RocketMQ's SQL92 message filter (property selectors), pure and stdlib-only.

``compile_expression("a > 5 AND b IN ('x', 'y')")`` parses once (FilterSyntaxError, with
the position, when RocketMQ would refuse the expression); the result's ``matches(props)``
tells whether a message with those properties (a str -> str mapping, as stored) is
selected. Brokers and clients share this one implementation. See docs/filters.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from ledgermq.filter.errors import EvaluationError, FilterSyntaxError
from ledgermq.filter.evaluate import Evaluator, compile_tree
from ledgermq.filter.javavalues import Value
from ledgermq.filter.nodes import Node, describe, property_names
from ledgermq.filter.parser import parse

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "EvaluationError",
    "FilterSyntaxError",
    "SqlExpression",
    "compile_expression",
    "is_tag_type",
]

EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: null, empty and "TAG" (exactly) mean a tag expression."""
    return not expression_type or expression_type == EXPRESSION_TYPE_TAG


@dataclass(frozen=True, slots=True)
class SqlExpression:
    """A compiled SQL92 selector."""

    text: str
    tree: Node = field(repr=False)
    _evaluate: Evaluator = field(repr=False, compare=False)
    names: frozenset[str] = frozenset()
    """The properties the expression reads; the others cannot change its result."""

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        """TRUE, FALSE or None (unknown); EvaluationError where Java's evaluation throws."""
        return self._evaluate(properties)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether a message with these properties is delivered: only a TRUE result is."""
        try:
            return self._evaluate(properties) is True
        except EvaluationError:
            return False

    def describe(self) -> str:
        """The parsed form, fully parenthesised (what the tree means)."""
        return describe(self.tree)


@lru_cache(maxsize=256)
def compile_expression(text: str) -> SqlExpression:
    """Parse and compile; FilterSyntaxError if RocketMQ's parser refuses ``text``."""
    if text is None or not text.strip():
        raise FilterSyntaxError("the expression is empty", text or "", 0)
    tree = parse(text)
    return SqlExpression(text, tree, compile_tree(tree), property_names(tree))
