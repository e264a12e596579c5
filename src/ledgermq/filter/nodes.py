"""The expression tree and the checks RocketMQ makes while building it.

RocketMQ's parser builds ``ComparisonExpression``/``LogicExpression``/``UnaryExpression``
objects through factory methods that refuse some operands (``createGreaterThan`` refuses a
string or boolean constant, ``createEqual`` a NULL literal, ``createBetween`` a reversed
constant range, ``createInFilter`` anything but a property on its left). Those refusals
are part of the language: a Java broker refuses such expressions, so ours must too. The
factories below make the same checks; an error raised here carries the position of the
operator that built the node.

Shapes: ``a <> b`` is ``NOT (a = b)``, ``a IS NULL`` an equality with the NULL constant
(built without the NULL check), ``a IS NOT NULL`` its negation, ``x BETWEEN l AND h`` is
``x >= l AND x <= h`` and ``x NOT BETWEEN l AND h`` is ``x < l OR x > h``, as in Java.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.filter.errors import FilterSyntaxError, position_of
from ledgermq.filter.javavalues import JDouble, JInt, JLong, Value, compare_doubles, java_double_text


class Node:
    """An expression; ``is_boolean`` says whether Java's class is a BooleanExpression."""

    __slots__ = ()
    is_boolean = False


@dataclass(frozen=True, slots=True)
class Const(Node):
    """A literal. TRUE, FALSE and NULL are BooleanConstantExpressions in Java."""

    value: Value

    @property
    def is_boolean(self) -> bool:  # type: ignore[override]
        return self.value is None or isinstance(self.value, bool)


@dataclass(frozen=True, slots=True)
class Prop(Node):
    name: str


@dataclass(frozen=True, slots=True)
class Negate(Node):
    operand: Node


@dataclass(frozen=True, slots=True)
class Not(Node):
    operand: Node
    is_boolean = True


@dataclass(frozen=True, slots=True)
class BoolCast(Node):
    """A bare property used as a condition: true only if its value is a Boolean, which a
    message property (a string) never is."""

    operand: Node
    is_boolean = True


@dataclass(frozen=True, slots=True)
class And(Node):
    left: Node
    right: Node
    is_boolean = True


@dataclass(frozen=True, slots=True)
class Or(Node):
    left: Node
    right: Node
    is_boolean = True


@dataclass(frozen=True, slots=True)
class Compare(Node):
    """``op`` is one of = > >= < <=."""

    op: str
    left: Node
    right: Node
    is_boolean = True


@dataclass(frozen=True, slots=True)
class In(Node):
    prop: Prop
    values: frozenset[str]
    negated: bool
    is_boolean = True


def property_names(node: Node) -> frozenset[str]:
    """Every property the expression reads (a message's other properties cannot matter)."""
    if isinstance(node, Prop):
        return frozenset({node.name})
    if isinstance(node, In):
        return frozenset({node.prop.name})
    if isinstance(node, Negate | Not | BoolCast):
        return property_names(node.operand)
    if isinstance(node, And | Or | Compare):
        return property_names(node.left) | property_names(node.right)
    return frozenset()


def describe(node: Node) -> str:
    """Java's ``toString`` of an expression, for error messages."""
    if isinstance(node, Const):
        return _const_text(node.value)
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, Negate):
        return f"(- {describe(node.operand)})"
    if isinstance(node, Not):
        return f"(NOT {describe(node.operand)})"
    if isinstance(node, BoolCast):
        return describe(node.operand)
    if isinstance(node, And):
        return f"({describe(node.left)} && {describe(node.right)})"
    if isinstance(node, Or):
        return f"({describe(node.left)} || {describe(node.right)})"
    if isinstance(node, Compare):
        symbol = "==" if node.op == "=" else node.op
        return f"({describe(node.left)} {symbol} {describe(node.right)})"
    if isinstance(node, In):
        values = ", ".join(sorted(node.values))
        return f"{node.prop.name} {'NOT IN' if node.negated else 'IN'} ( {values} )"
    raise TypeError(node)


def _const_text(value: Value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, JDouble):
        return java_double_text(float(value))
    return str(value)


class Builder:
    """The factory methods, bound to the expression text for error positions."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, detail: str, offset: int) -> FilterSyntaxError:
        return FilterSyntaxError(f"{detail} (at {_where(self.text, offset)})", self.text, offset)

    def as_boolean(self, node: Node, offset: int) -> Node:
        """``asBooleanExpression``: a property becomes a boolean cast, a non-boolean fails."""
        if node.is_boolean:
            return node
        if isinstance(node, Prop):
            return BoolCast(node)
        raise self.error(f"Expression will not result in a boolean value: {describe(node)}", offset)

    def check_less_than_operand(self, node: Node, offset: int) -> None:
        """Only numbers (and properties, negations) may be ordered: not strings, not booleans."""
        if isinstance(node, Const):
            if isinstance(node.value, JInt | JLong | JDouble):
                return
            raise self.error(f"Value '{describe(node)}' cannot be compared.", offset)
        if node.is_boolean:
            raise self.error(f"Value '{describe(node)}' cannot be compared.", offset)

    def ordering(self, op: str, left: Node, right: Node, offset: int) -> Compare:
        self.check_less_than_operand(left, offset)
        self.check_less_than_operand(right, offset)
        return Compare(op, left, right)

    def equal(self, left: Node, right: Node, offset: int) -> Compare:
        for side in (left, right):
            if isinstance(side, Const) and side.value is None:
                raise self.error(f"'{describe(side)}' cannot be compared.", offset)
        if isinstance(left, Const) and isinstance(right, Const) and left.is_boolean and not right.is_boolean:
            raise self.error(f"'{describe(left)}' cannot be compared with '{describe(right)}'", offset)
        return Compare("=", left, right)

    def not_equal(self, left: Node, right: Node, offset: int) -> Not:
        return Not(self.equal(left, right, offset))

    @staticmethod
    def is_null(left: Node) -> Compare:
        return Compare("=", left, Const(None))

    def between(self, value: Node, low: Node, high: Node, offset: int) -> And:
        if isinstance(low, Const) and isinstance(high, Const):
            if low.value is None or high.value is None:
                raise self.error("Illegal values of between, values can not be null!", offset)
            if _constant_order(high.value, low.value) < 0:
                raise self.error(
                    f"Illegal values of between, left value({_plain(low.value)}) must less than or equal to "
                    f"right value({_plain(high.value)})",
                    offset,
                )
        return And(self.ordering(">=", value, low, offset), self.ordering("<=", value, high, offset))

    def not_between(self, value: Node, low: Node, high: Node, offset: int) -> Or:
        return Or(self.ordering("<", value, low, offset), self.ordering(">", value, high, offset))

    def in_list(self, left: Node, values: list[str], negated: bool, offset: int) -> In:
        if not isinstance(left, Prop):
            raise self.error(f"Expected a property for In expression, got: {describe(left)}", offset)
        return In(left, frozenset(values), negated)


def _plain(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, JDouble):
        return java_double_text(float(value))
    return str(value)


def _constant_order(a: Value, b: Value) -> int:
    """The between check's ``__compare(high, low)`` for two constants: numbers by value,
    strings and booleans among themselves; mixed kinds are not ordered (Java returns -1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        if isinstance(a, bool) and isinstance(b, bool):
            return int(a) - int(b)
        return -1
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(a, str) and isinstance(b, str):
            return (a > b) - (a < b)
        return -1
    if isinstance(a, JDouble) or isinstance(b, JDouble):
        return compare_doubles(float(a), float(b))  # type: ignore[arg-type]
    return (a > b) - (a < b)  # type: ignore[operator]


def _where(text: str, offset: int) -> str:
    line, column = position_of(text, offset)
    return f"line {line}, column {column}"
