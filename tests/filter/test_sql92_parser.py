"""The SQL92 grammar and RocketMQ's evaluation quirks, case by case; refused expressions
and the position their error names."""

from __future__ import annotations

import pytest

from ledgermq.filter import EvaluationError, FilterSyntaxError, compile_expression
from ledgermq.filter.javavalues import JavaNumberFormatError, parse_double, parse_int, parse_long


def matches(expr: str, **props: str) -> bool:
    return compile_expression(expr).matches(props)


@pytest.mark.parametrize(
    "expr",
    [
        "a=3 and b<>4 And c>5 AND d<=4",  # RocketMQ's own ParserTest expressions
        "a=3 or b<>4 Or c>5 OR d<=4",
        "a in ('3', '4', '5')",
        "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
        "(a between 2 and 10) AND (b not between 6 and 9)",
        "a is null",
        "a is not null",
        "a <= now",  # "now" is just a property name in 4.x
        "TRUE",
        "NOT a",
        "a > 5L",
        "a > .5 and b < 5. and c > 5e3 and d > 1.5E-3",
        "a = 'it''s' -- comment\n",
        "/* lead */ a = 1 /* multi\nline */",
        "$x_1 = 1",
        "a > - - 3",
        "a > +3",
        "a BETWEEN -1 AND -5",  # negated literals are not constants: no order check, as in Java
        "a NOT BETWEEN 5 AND 1",  # NOT BETWEEN has no order check in Java either
    ],
)
def test_accepted(expr: str) -> None:
    compile_expression(expr)


@pytest.mark.parametrize(
    ("expr", "detail", "column"),
    [
        ("a and between 2 and 10", "Encountered BETWEEN", 7),
        (
            " a between 10 and 0",
            "Illegal values of between, left value(10) must less than or equal to right value(0)",
            4,
        ),
        ("a > 100000000000000000000000", "out of the Long range", 5),
        ("a > 'x'", "Value ''x'' cannot be compared.", 3),
        ("a < TRUE", "Value 'TRUE' cannot be compared.", 3),
        ("(a = 1) > 2", "cannot be compared", 9),
        ("a = NULL", "'NULL' cannot be compared.", 3),
        ("TRUE = 1", "'TRUE' cannot be compared with '1'", 6),
        ("a BETWEEN NULL AND 1", "values can not be null", 3),
        ("'x'", "will not result in a boolean value", 1),
        ("5", "will not result in a boolean value", 1),
        ("-a", "will not result in a boolean value", 1),
        ("NOT 5", "will not result in a boolean value", 5),
        ("a AND 5", "will not result in a boolean value", 7),
        ("(a = 1) IN ('x')", "Expected a property for In expression", 9),
        ("a IN (1, 2)", "was expecting a string literal", 7),
        ("a IN ()", "was expecting a string literal", 7),
        ("a = 1 b = 2", "Encountered identifier 'b'", 7),  # Java ignores the tail; we refuse it
        ("a = 1)", "Encountered ')'", 6),
        ("(a = 1", "was expecting ')'", 7),
        ("a != 1", "Unexpected character '!'", 3),
        ('a = "x"', "Unexpected character '\"'", 5),
        ("a = 'x", "Unterminated string literal", 5),
        ("a.b = 1", "Unexpected character '.'", 2),
        ("a = 1 -- no line end", "Encountered '-'", 7),
        ("0.0 < a", "is less than 4.9E-324", 1),
        ("a > 1e999", "is greater than", 5),
        ("a = 007", "Encountered decimal literal '0'", 6),
        ("a IS 1", "NULL or NOT NULL after IS", 6),
        ("a LIKE 'x%'", "Encountered identifier 'LIKE'", 3),
        ("", "empty", 1),
        ("   ", "empty", 1),
    ],
)
def test_refused_with_a_position(expr: str, detail: str, column: int) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_expression(expr)
    err = info.value
    assert str(err).startswith("Invalid MessageSelector. ")
    assert detail in str(err)
    assert err.column == column and err.line == 1
    if expr.strip():
        assert f"line 1, column {column}" in str(err)


def test_position_on_a_later_line() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_expression("a = 1\n  AND b > 'x'")
    assert (info.value.line, info.value.column) == (2, 9)


def test_keywords_ignore_case_and_identifiers_do_not() -> None:
    assert matches("a iS nOt NuLl aNd A Is NuLl", a="1")
    assert not matches("A = '1'", a="1")


def test_nesting_limit_is_an_error_not_a_crash() -> None:
    with pytest.raises(FilterSyntaxError, match="nests deeper"):
        compile_expression("NOT " * 500 + "TRUE")
    assert matches("(" * 50 + "a = 1" + ")" * 50, a="1")


# -- evaluation: RocketMQ's semantics ---------------------------------------------------------
def test_missing_properties_are_unknown_and_not_keeps_them_unknown() -> None:
    for expr in (
        "a = 1",
        "a <> 1",
        "NOT (a = 1)",
        "a > 1",
        "NOT (a > 1)",
        "a IN ('1')",
        "a NOT IN ('1')",
        "a BETWEEN 1 AND 2",
        "a NOT BETWEEN 1 AND 2",
        "NOT (a BETWEEN 1 AND 2)",
        "a = 'x'",
        "a <> 'x'",
    ):
        assert not matches(expr), expr
        assert compile_expression(expr).evaluate({}) is None, expr
    assert matches("a IS NULL") and not matches("a IS NOT NULL")
    assert matches("a = 1 OR b = 2", b="2") and not matches("a = 1 AND TRUE")
    assert compile_expression("a = 1 AND FALSE").evaluate({}) is False
    assert matches("NOT (a = 1 AND FALSE)")


def test_java_equality_quirks() -> None:
    assert not matches("1 = a") and matches("NOT (1 = a)")  # the literal on the left: FALSE, not unknown
    assert matches("a = b") and not matches("a = b", a="1")  # two absent properties are equal
    assert matches("a = TRUE", a="TRUE") and matches("a = FALSE", a="yes") and not matches("a = TRUE", a="1")


def test_numeric_conversions_follow_the_literal_type() -> None:
    assert matches("a = 5", a="5") and matches("a = 5", a="+5") and matches("a = 5", a="0005")
    assert not matches("a = 5", a="5.0") and not matches("a = 5", a=" 5")  # Integer.valueOf
    assert matches("a = 5.0", a=" 5 ") and matches("a = 5.0", a="5f") and matches("a = 5.0", a="0x1.4p2")
    assert not matches("a > 5", a="3000000000")  # Integer.valueOf overflows: an error
    assert matches("a > 2147483648", a="3000000000")  # a Long literal reads Long
    assert matches("a > 1.5", a="NaN") and not matches("a < 1.5", a="NaN")  # NaN above all, as Double.compareTo
    assert matches("a < -2147483648", a="-2147483649")
    assert matches("a > b", a="10", b="9")  # two strings: compared as doubles, not text
    assert not matches("a > b", a="x", b="9")
    assert not matches("-a = -1", a="1")  # negating a string gives null


def test_evaluation_error_ends_the_whole_expression() -> None:
    compiled = compile_expression("a > 5 OR TRUE")
    with pytest.raises(EvaluationError):
        compiled.evaluate({"a": "five"})
    assert not compiled.matches({"a": "five"})
    assert matches("TRUE OR a > 5", a="five")  # short-circuit: never evaluated
    assert not matches("a = 'x' OR a = 5", a="y")


def test_bare_properties_and_not_binding() -> None:
    assert not matches("a", a="true") and matches("NOT a", a="anything") and not matches("NOT a")
    assert not matches("NOT a = 1", a="1")  # (NOT a) = 1: TRUE = 1 is false
    assert matches("NOT (a = 1)", a="2")


def test_strings_and_in_lists() -> None:
    assert matches("a = 'it''s'", a="it's") and matches("a IN ('x', 'it''s')", a="it's")
    assert matches("a NOT IN ('x', 'y', 'z', 'w', 'v')", a="q") and not matches("a IN ('X')", a="x")
    assert matches("TAGS = 'tagA' AND KEYS IS NOT NULL", TAGS="tagA", KEYS="k1")


def test_java_number_parsers() -> None:
    assert parse_int("-2147483648") == -(2**31) and parse_long("9223372036854775807") == 2**63 - 1
    assert parse_int("\u0661\u0662") == 12  # Character.digit accepts any Unicode digit
    for bad in ("", "+", "1_0", " 1", "2147483648", "1.0", "0x10"):
        with pytest.raises(JavaNumberFormatError):
            parse_int(bad)
    assert parse_double(" \t-1.5e2d\n") == -150.0 and parse_double(".5") == 0.5 and parse_double("5.") == 5.0
    assert parse_double("-Infinity") == float("-inf") and parse_double("0x10p0") == 16.0
    for bad in ("inf", "nan", "1_0", "1e", "NaNd", "\u0661", "0x10", "--1"):
        with pytest.raises(JavaNumberFormatError):
            parse_double(bad)
