"""Evaluating an expression tree against a message's properties, as RocketMQ 4.9 does.

The tree is compiled once into nested closures (a pull evaluates it once per message).
The semantics are RocketMQ's ``ComparisonExpression``/``LogicExpression``/``UnaryExpression``
with string conversion on (the parser always turns it on):

* Values are Java objects: a property is a String or null (absent); literals are
  Integer, Long, Double, String, Boolean.
* Three-valued logic: a comparison involving null is null (unknown), ``NOT null`` is null,
  ``null AND false`` is false, ``null OR true`` is true; a message matches only when the
  whole expression is TRUE. So ``NOT (a = 1)`` does not match a message without ``a``.
* ``=`` quirks kept: ``prop = 5`` with prop absent is null, but ``5 = prop`` is FALSE
  (Java tests the left side first), and two absent properties are equal (TRUE).
* A comparison of a String with a number converts the String with the number's
  ``valueOf`` (Integer for 5, Long for 5000000000, Double for 5.5); ``<``/``>`` between two
  Strings compares them as Doubles. A conversion that fails is an error.
* An error ends the evaluation (it is not unknown): the message does not match, even
  under an OR whose other side is true. RocketMQ's broker logs it and skips the message.
* A bare property as a condition is FALSE (a String is not a Boolean), null if absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ledgermq.filter.errors import EvaluationError
from ledgermq.filter.javavalues import (
    JavaNumberFormatError,
    JDouble,
    JInt,
    JLong,
    Value,
    compare_doubles,
    parse_boolean,
    parse_double,
    parse_int,
    parse_long,
)
from ledgermq.filter.nodes import And, BoolCast, Compare, Const, In, Negate, Node, Not, Or, Prop

Props = Mapping[str, str]
Evaluator = Callable[[Props], Value]

_STRING_TO: dict[type, Callable[[str], JInt | JLong | JDouble]] = {
    JInt: parse_int,
    JLong: parse_long,
    JDouble: parse_double,
}


def _convert(text: str, kind: type) -> JInt | JLong | JDouble:
    try:
        return _STRING_TO[kind](text)
    except JavaNumberFormatError as exc:
        raise EvaluationError(str(exc)) from None


def _numbers(a: JInt | JLong | JDouble, b: JInt | JLong | JDouble) -> int:
    if type(a) is JDouble or type(b) is JDouble:
        return compare_doubles(float(a), float(b))
    return (a > b) - (a < b)


def java_compare(lv: Value, rv: Value) -> int:
    """``ComparisonExpression.__compare`` with string conversion on; both sides non-null."""
    tl, tr = type(lv), type(rv)
    if tl is tr:
        if tl is JDouble:
            return compare_doubles(lv, rv)  # type: ignore[arg-type]
        return (lv > rv) - (lv < rv)  # type: ignore[operator]
    if tl is bool:
        if tr is str:  # Java casts the Boolean to String here: ClassCastException
            raise EvaluationError(f"a boolean cannot be compared with the string {rv!r}")
        return -1
    if tl is str:
        if tr is bool:
            b = parse_boolean(lv)  # type: ignore[arg-type]
            return int(b) - int(rv)  # type: ignore[arg-type]
        return _numbers(_convert(lv, tr), rv)  # type: ignore[arg-type]
    # tl is a number
    if tr is str:
        return _numbers(lv, _convert(rv, tl))  # type: ignore[arg-type]
    if tr is bool:
        return -1
    return _numbers(lv, rv)  # type: ignore[arg-type]


def compile_tree(node: Node) -> Evaluator:
    """A function of the properties giving the expression's value (EvaluationError on error)."""
    if isinstance(node, Const):
        value = node.value
        return lambda props: value
    if isinstance(node, Prop):
        return _property(node.name)
    if isinstance(node, Negate):
        return _negate(compile_tree(node.operand))
    if isinstance(node, Not):
        return _not(compile_tree(node.operand))
    if isinstance(node, BoolCast):
        return _bool_cast(compile_tree(node.operand))
    if isinstance(node, And):
        return _and(compile_tree(node.left), compile_tree(node.right))
    if isinstance(node, Or):
        return _or(compile_tree(node.left), compile_tree(node.right))
    if isinstance(node, In):
        return _in(node.prop.name, node.values, node.negated)
    if isinstance(node, Compare):
        if node.op == "=":
            return _equal(compile_tree(node.left), compile_tree(node.right))
        return _ordering(node.op, node.left, node.right)
    raise TypeError(f"not an expression node: {node!r}")


def _property(name: str) -> Evaluator:
    def get(props: Props) -> Value:
        return props.get(name)

    return get


def _negate(operand: Evaluator) -> Evaluator:
    def negate(props: Props) -> Value:
        v = operand(props)
        t = type(v)
        if t is JInt or t is JLong:
            return t(-v)  # type: ignore[operator]
        if t is JDouble:
            return JDouble(-v)  # type: ignore[operator]
        return None  # a String, Boolean or null is not a Number

    return negate


def _not(operand: Evaluator) -> Evaluator:
    def not_(props: Props) -> Value:
        v = operand(props)
        return None if v is None else not v

    return not_


def _bool_cast(operand: Evaluator) -> Evaluator:
    def cast(props: Props) -> Value:
        v = operand(props)
        if v is None:
            return None
        return v if type(v) is bool else False

    return cast


def _and(left: Evaluator, right: Evaluator) -> Evaluator:
    def and_(props: Props) -> Value:
        lv = left(props)
        if lv is False:
            return False
        rv = right(props)
        if rv is False:
            return False
        if lv is None or rv is None:
            return None
        return True

    return and_


def _or(left: Evaluator, right: Evaluator) -> Evaluator:
    def or_(props: Props) -> Value:
        lv = left(props)
        if lv is True:
            return True
        rv = right(props)
        if rv is True:
            return True
        if lv is None or rv is None:
            return None
        return False

    return or_


def _in(name: str, values: frozenset[str], negated: bool) -> Evaluator:
    def in_(props: Props) -> Value:
        v = props.get(name)
        if v is None:
            return None
        return (v in values) != negated

    return in_


def _equal(left: Evaluator, right: Evaluator) -> Evaluator:
    def equal(props: Props) -> Value:
        lv = left(props)
        rv = right(props)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return java_compare(lv, rv) == 0

    return equal


_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _ordering(op: str, left_node: Node, right_node: Node) -> Evaluator:
    test = _TESTS[op]
    right_const = right_node.value if isinstance(right_node, Const) else None
    if isinstance(left_node, Prop) and type(right_const) in _STRING_TO:
        # The common ``prop > 5`` shape: one conversion, no generic dispatch.
        name, number, kind = left_node.name, right_const, type(right_const)
        parse = _STRING_TO[kind]
        as_double = kind is JDouble

        def prop_vs_number(props: Props) -> Value:
            text = props.get(name)
            if text is None:
                return None
            try:
                v = parse(text)
            except JavaNumberFormatError as exc:
                raise EvaluationError(str(exc)) from None
            if as_double:
                return test(compare_doubles(v, number))  # type: ignore[arg-type]
            return test((v > number) - (v < number))  # type: ignore[operator]

        return prop_vs_number
    left, right = compile_tree(left_node), compile_tree(right_node)

    def ordering(props: Props) -> Value:
        lv = left(props)
        if lv is None:
            return None
        rv = right(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # both must read as Doubles
            return test(compare_doubles(_convert(lv, JDouble), _convert(rv, JDouble)))
        return test(java_compare(lv, rv))

    return ordering
