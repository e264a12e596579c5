"""Errors of the SQL92 filter: a refused expression, and a failed evaluation."""

from __future__ import annotations


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset``, as JavaCC counts them (a tab is one column)."""
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


class FilterSyntaxError(ValueError):
    """The expression is not valid SQL92 for RocketMQ (syntax, or a check RocketMQ's parser
    makes while it builds the expression, such as ``a > 'x'`` or ``a BETWEEN 10 AND 0``).

    ``str()`` starts with "Invalid MessageSelector." as RocketMQ's MQFilterException does,
    then says what is wrong and where; ``offset`` (0-based), ``line`` and ``column``
    (1-based) locate it."""

    def __init__(self, detail: str, expression: str, offset: int) -> None:
        self.detail = detail
        self.expression = expression
        self.offset = offset
        self.line, self.column = position_of(expression, offset)
        super().__init__(f"Invalid MessageSelector. {detail}")


class EvaluationError(Exception):
    """Evaluating against one message failed where Java throws (a property that is not a
    number compared with a number, ``>`` between two non-numeric strings...). RocketMQ's
    broker logs it and treats the message as not matching; so does ``SqlFilter.matches``."""
