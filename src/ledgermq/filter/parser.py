"""Recursive-descent parser for RocketMQ's SQL92 selector grammar (4.9 ``SelectorParser.jj``).

Precedence, loosest first, as in the grammar::

    orExpression      : andExpression (OR andExpression)*
    andExpression     : equalityExpression (AND equalityExpression)*
    equalityExpression: comparison (= comparison | <> comparison | IS NULL | IS NOT NULL)*
    comparison        : unary (> | >= | < | <= unary
                              | [NOT] BETWEEN unary AND unary
                              | [NOT] IN '(' string (, string)* ')')*
    unary             : + unary | - unary | NOT unary | primary
    primary           : literal | identifier | '(' orExpression ')'

Note that NOT binds tighter than comparisons (``NOT a = 1`` is ``(NOT a) = 1``; write
``NOT (a = 1)``), as in RocketMQ and ActiveMQ. IN lists hold string literals only.

One deliberate difference: RocketMQ's generated parser stops after the first complete
expression and silently ignores whatever follows (``a = 1 b = 2`` filters on ``a = 1``);
here trailing input is a syntax error.
"""

from __future__ import annotations

from ledgermq.filter.errors import FilterSyntaxError
from ledgermq.filter.javavalues import DOUBLE_MIN_VALUE, INT_MAX, INT_MIN, LONG_MAX, JDouble, JInt, JLong
from ledgermq.filter.lexer import Kind, Token, tokenize
from ledgermq.filter.nodes import And, Builder, Const, Negate, Node, Not, Or, Prop

_ORDERING = (">", ">=", "<", "<=")
_MAX_DEPTH = 200  # nesting beyond this is refused, not a Python RecursionError


def parse(text: str) -> Node:
    """The boolean expression ``text`` denotes; FilterSyntaxError when RocketMQ would refuse it."""
    return _Parser(text).parse()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.build = Builder(text)
        self.depth = 0

    # -- token helpers ---------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def at(self, text: str, token: Token | None = None) -> bool:
        t = self.tok if token is None else token
        return t.kind in (Kind.KEYWORD, Kind.OP) and t.text == text

    def take(self) -> Token:
        t = self.tok
        self.pos += 1
        return t

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.unexpected(f"'{text}'" if not text.isalpha() else text)
        return self.take()

    def unexpected(self, wanted: str) -> FilterSyntaxError:
        t = self.tok
        return self.build.error(f"Encountered {t.describe()}; was expecting {wanted}", t.offset)

    # -- grammar ---------------------------------------------------------------------------
    def parse(self) -> Node:
        start = self.tok.offset
        node = self.or_expression()
        if self.tok.kind is not Kind.EOF:
            raise self.unexpected("AND, OR or the end of the expression")
        return self.build.as_boolean(node, start)

    def or_expression(self) -> Node:
        start = self.tok.offset
        left = self.and_expression()
        while self.at("OR"):
            self.take()
            right_start = self.tok.offset
            right = self.and_expression()
            left = self._logic("OR", left, start, right, right_start)
        return left

    def and_expression(self) -> Node:
        start = self.tok.offset
        left = self.equality_expression()
        while self.at("AND"):
            self.take()
            right_start = self.tok.offset
            right = self.equality_expression()
            left = self._logic("AND", left, start, right, right_start)
        return left

    def _logic(self, kind: str, left: Node, left_at: int, right: Node, right_at: int) -> Node:
        lb = self.build.as_boolean(left, left_at)
        rb = self.build.as_boolean(right, right_at)
        return And(lb, rb) if kind == "AND" else Or(lb, rb)

    def equality_expression(self) -> Node:
        left = self.comparison_expression()
        while True:
            if self.at("=") or self.at("<>"):
                op = self.take()
                right = self.comparison_expression()
                if op.text == "=":
                    left = self.build.equal(left, right, op.offset)
                else:
                    left = self.build.not_equal(left, right, op.offset)
            elif self.at("IS"):
                self.take()
                if self.at("NULL"):
                    self.take()
                    left = self.build.is_null(left)
                elif self.at("NOT"):
                    self.take()
                    self.expect("NULL")
                    left = Not(self.build.is_null(left))
                else:
                    raise self.unexpected("NULL or NOT NULL after IS")
            else:
                return left

    def comparison_expression(self) -> Node:
        left = self.unary()
        while True:
            t = self.tok
            if t.kind is Kind.OP and t.text in _ORDERING:
                self.take()
                left = self.build.ordering(t.text, left, self.unary(), t.offset)
            elif self.at("BETWEEN"):
                self.take()
                low, high = self._range()
                left = self.build.between(left, low, high, t.offset)
            elif self.at("NOT") and self.at("BETWEEN", self.peek()):
                self.take()
                self.take()
                low, high = self._range()
                left = self.build.not_between(left, low, high, t.offset)
            elif self.at("IN"):
                self.take()
                left = self.build.in_list(left, self._string_list(), False, t.offset)
            elif self.at("NOT") and self.at("IN", self.peek()):
                self.take()
                self.take()
                left = self.build.in_list(left, self._string_list(), True, t.offset)
            else:
                return left

    def _range(self) -> tuple[Node, Node]:
        low = self.unary()
        self.expect("AND")
        return low, self.unary()

    def _string_list(self) -> list[str]:
        self.expect("(")
        values = [self._string()]
        while self.at(","):
            self.take()
            values.append(self._string())
        self.expect(")")
        return values

    def _string(self) -> str:
        if self.tok.kind is not Kind.STRING:
            raise self.unexpected("a string literal")
        return _decode_string(self.take().text)

    def unary(self) -> Node:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.build.error(f"Expression nests deeper than {_MAX_DEPTH} levels", self.tok.offset)
        try:
            if self.at("+"):
                self.take()
                return self.unary()
            if self.at("-"):
                self.take()
                return Negate(self.unary())
            if self.at("NOT"):
                self.take()
                start = self.tok.offset
                return Not(self.build.as_boolean(self.unary(), start))
            return self.primary()
        finally:
            self.depth -= 1

    def primary(self) -> Node:
        t = self.tok
        if t.kind is Kind.STRING:
            self.take()
            return Const(_decode_string(t.text))
        if t.kind is Kind.DECIMAL:
            self.take()
            return self._decimal(t)
        if t.kind is Kind.FLOAT:
            self.take()
            return self._float(t)
        if t.kind is Kind.KEYWORD and t.text in ("TRUE", "FALSE", "NULL"):
            self.take()
            return Const(None if t.text == "NULL" else t.text == "TRUE")
        if t.kind is Kind.ID:
            self.take()
            return Prop(t.text)
        if self.at("("):
            self.take()
            inner = self.or_expression()
            self.expect(")")
            return inner
        raise self.unexpected("a literal, a property name, '(', NOT, '+' or '-'")

    def _decimal(self, t: Token) -> Const:
        """``ConstantExpression.createFromDecimal``: a Long, narrowed to Integer when it fits."""
        value = int(t.text.rstrip("lL"))
        if value > LONG_MAX:
            raise self.build.error(f"Decimal literal {t.text} is out of the Long range", t.offset)
        return Const(JInt(value) if INT_MIN <= value <= INT_MAX else JLong(value))

    def _float(self, t: Token) -> Const:
        """``ConstantExpression.createFloat``: refuses infinity, and (quirk kept) zero and
        anything below Double.MIN_VALUE, so ``0.0`` is not a valid literal; write ``0``."""
        value = float(t.text)
        if value == float("inf"):
            raise self.build.error(f"{t.text} is greater than 1.7976931348623157E308", t.offset)
        if value < DOUBLE_MIN_VALUE:
            raise self.build.error(f"{t.text} is less than 4.9E-324", t.offset)
        return Const(JDouble(value))


def _decode_string(image: str) -> str:
    return image[1:-1].replace("''", "'")
