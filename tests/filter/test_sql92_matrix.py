"""Property matrix: random expressions from the grammar and random property maps, our
filter against a small reference evaluator written here from RocketMQ's rules.

The reference works on its own expression tree (built by the strategies, then printed as
SQL text for the filter under test) and converts strings to numbers with its own code, so
the two share nothing but the rules they implement:

* three-valued logic, a message matches only on TRUE;
* a property compared with an integer literal is read as Java's Integer.valueOf (Long
  when the literal is outside the int range, Double for a decimal literal); a failed
  conversion is an error and an error means "no match" for the whole expression;
* ``prop = literal`` with prop absent is unknown, ``literal = prop`` is FALSE; ``<``/``>``
  between two properties compares them as doubles;
* a string literal equals only the same string.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.filter import compile_expression

MATRIX = settings(max_examples=1000, derandomize=True, deadline=None)
NAMES = ("a", "b", "c", "TAGS")
VALUES = (
    "0",
    "5",
    "-3",
    "+7",
    "12",
    "2147483647",
    "2147483648",
    "-9000000000",
    "1.5",
    "-0.5",
    "1e3",
    "NaN",
    "Infinity",
    " 6 ",
    "5.0",
    "x",
    "abc",
    "TRUE",
    "true",
    "false",
    "tagA",
    "it's",
)

INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)


class Boom(Exception):
    """Java threw: the whole evaluation ends, the message does not match."""


# -- the reference's own tree -------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    value: int | float  # a float here is a decimal literal (a Java Double)

    def sql(self) -> str:
        if isinstance(self.value, float):
            return repr(self.value)
        return str(self.value) if self.value >= 0 else f"-{-self.value}"

    @property
    def kind(self) -> str:
        if isinstance(self.value, float):
            return "double"
        # The literal is the magnitude (a minus sign is an operator): -2147483648 is a Long.
        return "int" if abs(self.value) <= INT_RANGE[1] else "long"


@dataclass(frozen=True)
class Text:
    value: str

    def sql(self) -> str:
        return "'" + self.value.replace("'", "''") + "'"


@dataclass(frozen=True)
class Var:
    name: str

    def sql(self) -> str:
        return self.name


@dataclass(frozen=True)
class Cond:
    op: str
    args: tuple[Any, ...]


def _kw(word: str, flip: bool) -> str:
    return word.lower() if flip else word


def sql(e: Any, flip: bool = False) -> str:
    if not isinstance(e, Cond):
        return str(e.sql())
    op, args = e.op, e.args
    if op in ("=", "<>", ">", ">=", "<", "<="):
        return f"{args[0].sql()} {op} {args[1].sql()}"
    if op in ("BETWEEN", "NOT BETWEEN"):
        return f"{args[0].sql()} {_kw(op, flip)} {args[1].sql()} {_kw('AND', flip)} {args[2].sql()}"
    if op in ("IN", "NOT IN"):
        return f"{args[0].sql()} {_kw(op, flip)} (" + ", ".join(Text(v).sql() for v in args[1]) + ")"
    if op in ("IS NULL", "IS NOT NULL"):
        return f"{args[0].sql()} {_kw(op, flip)}"
    if op in ("TRUE", "FALSE"):
        return _kw(op, flip)
    if op == "NOT":
        return f"{_kw('NOT', flip)} ({sql(args[0], not flip)})"
    return f"({sql(args[0], not flip)}) {_kw(op, flip)} /* c */ ({sql(args[1], flip)})"


# -- the reference's semantics ------------------------------------------------------------
def to_int(text: str, bounds: tuple[int, int]) -> int:
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        raise Boom
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise Boom
    return value


def to_double(text: str) -> float:
    t = text.strip(" ")
    body = t.lstrip("+-")
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return -math.inf if t.startswith("-") else math.inf
    if re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", t) is None:
        raise Boom
    return float(t)


def order(x: float, y: float) -> int:
    """Java's Double.compare for the values generated here (NaN is the largest)."""
    if math.isnan(x) or math.isnan(y):
        return (math.isnan(x)) - (math.isnan(y))
    return (x > y) - (x < y)


def compare_prop_num(text: str, num: Num) -> int:
    if num.kind == "double":
        return order(to_double(text), float(num.value))
    v = to_int(text, INT_RANGE if num.kind == "int" else LONG_RANGE)
    return (v > num.value) - (v < num.value)


TESTS = {
    "=": lambda c: c == 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def value_of(x: Any, props: dict[str, str]) -> Any:
    return props.get(x.name) if isinstance(x, Var) else x


def compare(op: str, left: Any, right: Any, props: dict[str, str]) -> bool | None:
    lv, rv = value_of(left, props), value_of(right, props)
    if op == "=":
        if lv is None and rv is None:
            return True
        if lv is None:
            return None
        if rv is None:
            return False
    elif lv is None or rv is None:
        return None
    if isinstance(lv, str) and isinstance(rv, str):
        if op == "=":
            return lv == rv
        return TESTS[op](order(to_double(lv), to_double(rv)))
    if isinstance(lv, Text) or isinstance(rv, Text):  # prop = 'x' / 'x' = prop
        return (lv.value if isinstance(lv, Text) else lv) == (rv.value if isinstance(rv, Text) else rv)
    if isinstance(lv, str):
        return TESTS[op](compare_prop_num(lv, rv))
    return TESTS[op](-compare_prop_num(rv, lv))


def ref(e: Cond, props: dict[str, str]) -> bool | None:
    op, args = e.op, e.args
    if op in TESTS:
        return compare(op, args[0], args[1], props)
    if op == "<>":
        r = compare("=", args[0], args[1], props)
        return None if r is None else not r
    if op == "BETWEEN":
        return ref(Cond("AND", (Cond(">=", args[:2]), Cond("<=", (args[0], args[2])))), props)
    if op == "NOT BETWEEN":
        return ref(Cond("OR", (Cond("<", args[:2]), Cond(">", (args[0], args[2])))), props)
    if op in ("IN", "NOT IN"):
        v = props.get(args[0].name)
        return None if v is None else (v in args[1]) == (op == "IN")
    if op in ("IS NULL", "IS NOT NULL"):
        return (args[0].name in props) == (op == "IS NOT NULL")
    if op in ("TRUE", "FALSE"):
        return op == "TRUE"
    if op == "NOT":
        r = ref(args[0], props)
        return None if r is None else not r
    left = ref(args[0], props)
    if op == "AND":
        if left is False:
            return False
        right = ref(args[1], props)
        if right is False:
            return False
        return None if left is None or right is None else True
    if left is True:
        return True
    right = ref(args[1], props)
    if right is True:
        return True
    return None if left is None or right is None else False


def matches(e: Cond, props: dict[str, str]) -> bool:
    try:
        return ref(e, props) is True
    except Boom:
        return False


# -- strategies -----------------------------------------------------------------------------
var = st.sampled_from(NAMES).map(Var)
num = st.one_of(
    st.integers(-20, 20),
    st.sampled_from([2147483647, 2147483648, -2147483648, -9000000000, 9000000000]),
    st.sampled_from([1.5, 0.25, 1000.0, 5.0, 2.5e9]),
).map(Num)
text = st.sampled_from((*VALUES, "", "''")).map(Text)


@st.composite
def ranges(draw: Any) -> tuple[Num, Num]:
    lo, hi = sorted([draw(st.integers(-10, 20)), draw(st.integers(-10, 20))])
    return Num(lo), Num(hi)


def leaves() -> st.SearchStrategy[Cond]:
    cmp_num = st.builds(
        lambda op, v, n, rev: Cond(op, (n, v) if rev else (v, n)),
        st.sampled_from(["=", "<>", ">", ">=", "<", "<="]),
        var,
        num,
        st.booleans(),
    )
    cmp_text = st.builds(
        lambda op, v, t, rev: Cond(op, (t, v) if rev else (v, t)),
        st.sampled_from(["=", "<>"]),
        var,
        text,
        st.booleans(),
    )
    cmp_vars = st.builds(lambda op, x, y: Cond(op, (x, y)), st.sampled_from(["=", "<>", ">", "<="]), var, var)
    between = st.builds(lambda op, v, r: Cond(op, (v, *r)), st.sampled_from(["BETWEEN", "NOT BETWEEN"]), var, ranges())
    in_list = st.builds(
        lambda op, v, vals: Cond(op, (v, tuple(vals))),
        st.sampled_from(["IN", "NOT IN"]),
        var,
        st.lists(st.sampled_from(VALUES), min_size=1, max_size=4),
    )
    nulls = st.builds(lambda op, v: Cond(op, (v,)), st.sampled_from(["IS NULL", "IS NOT NULL"]), var)
    consts = st.sampled_from(["TRUE", "FALSE"]).map(lambda op: Cond(op, ()))
    return st.one_of(cmp_num, cmp_text, cmp_vars, between, in_list, nulls, consts)


conditions = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        inner.map(lambda e: Cond("NOT", (e,))),
        st.builds(lambda op, x, y: Cond(op, (x, y)), st.sampled_from(["AND", "OR"]), inner, inner),
    ),
    max_leaves=8,
)
property_maps = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=4)


@MATRIX
@given(conditions, st.lists(property_maps, min_size=1, max_size=6), st.booleans())
def test_filter_agrees_with_the_reference(expr: Cond, maps: list[dict[str, str]], flip: bool) -> None:
    text = sql(expr, flip)
    compiled = compile_expression(text)
    for props in maps:
        assert compiled.matches(props) == matches(expr, props), (text, props, compiled.describe())


def test_the_matrix_is_not_trivial() -> None:
    """The reference itself sees matches, non-matches, unknowns and errors among the maps."""
    a5 = Cond(">", (Var("a"), Num(5)))
    assert matches(a5, {"a": "6"}) and not matches(a5, {"a": "4"})
    assert ref(a5, {}) is None
    assert not matches(Cond("OR", (a5, Cond("TRUE", ()))), {"a": "x"})  # the error wins over OR TRUE
