"""The built-in `calculator` tool: a safe arithmetic evaluator (never `eval`).

`evaluate` parses with `ast` in "eval" mode and walks only int/float constants, unary
+ and -, binary + - * / // % ** and parentheses. Before parsing, "×" and an "x"/"X"
that is not part of a word ("2x3", "2 x 3") become "*", "÷" becomes "/", "^" becomes
"**" (power), and leading zeros of integers are dropped ("007" is 7). Abuse is refused
with a `CalculatorError` before it costs anything: at most `MAX_EXPRESSION_LENGTH`
characters, exponents within ±`MAX_ABS_EXPONENT`, and every number - literal,
intermediate or final - within ±`MAX_ABS_VALUE` = 1e100, checked for powers before
computing them, so `9**9**9` fails at once instead of building a 370-million-digit
integer.

`find_expression` spots arithmetic in natural text; its rule is documented there.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, cast

from services.lib.llm import ToolSchema

MAX_EXPRESSION_LENGTH = 200
MAX_ABS_EXPONENT = 1000
MAX_VALUE_DIGITS = 100
MAX_ABS_VALUE = 10**MAX_VALUE_DIGITS

# Plain (non-scientific) notation is used for floats in this magnitude range.
_PLAIN_MIN = 1e-6
_PLAIN_MAX = 1e15

CALCULATOR_SCHEMA = ToolSchema(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression exactly. Supports numbers, parentheses, "
        "+ - * / // (floor division) % (remainder) and ** or ^ (power)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression to evaluate, e.g. (2 + 3) * 4",
                "maxLength": MAX_EXPRESSION_LENGTH,
            },
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
)


class CalculatorError(ValueError):
    """The expression or the tool arguments were rejected; the message says why."""


_OPERATOR_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.UAdd: "+",
    ast.USub: "-",
}

# Friendlier names than the AST class for what people actually type by mistake.
_NODE_DESCRIPTIONS: dict[type[ast.AST], str] = {
    ast.Name: "name",
    ast.Call: "function call",
    ast.Attribute: "attribute access",
    ast.Subscript: "indexing",
    ast.Compare: "comparison",
    ast.BoolOp: "boolean operator",
    ast.Tuple: "tuple (comma)",
}

# "x" is multiplication only when it is not part of a word ("2x3", "2 x 3", not "max").
_TIMES_X = re.compile(r"(?<![^\W\d_])[xX](?![^\W\d_])")
_LEADING_ZEROS = re.compile(r"(?<![0-9.\w])0+(?=[0-9])")


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raise `CalculatorError` naming the problem."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalculatorError(
            f"expression is too long ({len(expression)} characters, the limit is {MAX_EXPRESSION_LENGTH})"
        )
    source = _normalise(expression)
    if not source:
        raise CalculatorError("expression is empty")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid arithmetic expression: {expression.strip()!r}") from exc
    # Reject anything foreign before computing, so "1/0 + f(2)" reports the call.
    for node in ast.walk(tree.body):
        _check_node(node)
    return _eval(tree.body)


def format_number(value: int | float) -> str:
    """Integers in full, floats with up to 12 significant digits and no trailing zeros.

    Scientific notation is only used for floats outside [1e-6, 1e15).
    """
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise CalculatorError(f"result is not a finite number: {value}")
    text = f"{value:.12g}"
    if "e" in text and _PLAIN_MIN <= abs(value) < _PLAIN_MAX:
        text = format(Decimal(text), "f")
    return "0" if text == "-0" else text


async def calculator_tool(arguments: Mapping[str, Any]) -> str:
    """The `calculator` tool: {"expression": "..."} -> the formatted result."""
    unexpected = sorted(set(arguments) - {"expression"})
    if unexpected:
        raise CalculatorError(f"unexpected argument(s): {', '.join(map(repr, unexpected))}")
    if "expression" not in arguments:
        raise CalculatorError("missing required argument 'expression'")
    expression = arguments["expression"]
    if not isinstance(expression, str):
        raise CalculatorError(f"argument 'expression' must be a string, not {type(expression).__name__}")
    return format_number(evaluate(expression))


def _normalise(expression: str) -> str:
    text = " ".join(expression.split())  # eval mode rejects leading indentation and newlines
    text = _TIMES_X.sub("*", text).replace("×", "*").replace("÷", "/").replace("^", "**")
    return _LEADING_ZEROS.sub("", text)


def _check_node(node: ast.AST) -> None:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            raise CalculatorError(f"booleans are not numbers: {value}")
        if isinstance(value, complex):
            raise CalculatorError(f"complex numbers are not supported: {value}")
        if not isinstance(value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {type(value).__name__} {value!r}")
        _check_magnitude(value, "number")
    elif isinstance(node, ast.BinOp | ast.UnaryOp):
        if type(node.op) not in _OPERATOR_SYMBOLS:
            raise CalculatorError(f"unsupported operator {type(node.op).__name__}: only + - * / // % ** are allowed")
    elif not isinstance(node, ast.operator | ast.unaryop):
        what = _NODE_DESCRIPTIONS.get(type(node), f"syntax {type(node).__name__}")
        detail = f" {node.id!r}" if isinstance(node, ast.Name) else ""
        raise CalculatorError(f"unsupported {what}{detail}: only numbers, + - * / // % ** and parentheses are allowed")


def _eval(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant):
        return cast("int | float", node.value)  # _check_node let only plain ints and floats through
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    assert isinstance(node, ast.BinOp)  # the only other node _check_node lets through
    left, right = _eval(node.left), _eval(node.right)
    op = node.op
    if isinstance(op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
        raise CalculatorError(f"division by zero ({format_number(left)} {_OPERATOR_SYMBOLS[type(op)]} 0)")
    result: int | float
    if isinstance(op, ast.Add):
        result = left + right
    elif isinstance(op, ast.Sub):
        result = left - right
    elif isinstance(op, ast.Mult):
        result = left * right
    elif isinstance(op, ast.Div):
        result = left / right
    elif isinstance(op, ast.FloorDiv):
        result = left // right
    elif isinstance(op, ast.Mod):
        result = left % right
    else:
        result = _power(left, right)
    return _check_magnitude(result, "result")


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_ABS_EXPONENT:
        raise CalculatorError(f"exponent {format_number(exponent)} is too large (the limit is ±{MAX_ABS_EXPONENT})")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero (0 raised to a negative power)")
    if base < 0 and not float(exponent).is_integer():
        raise CalculatorError("a negative number cannot be raised to a fractional power")
    # Estimate the result's digits first: computing a huge power is itself the attack.
    if base != 0 and exponent * math.log10(abs(base)) > MAX_VALUE_DIGITS:
        raise CalculatorError(f"result is too large (the limit is ±1e{MAX_VALUE_DIGITS})")
    result: int | float = base**exponent
    return result


def _check_magnitude(value: int | float, what: str) -> int | float:
    if isinstance(value, float) and math.isnan(value):
        raise CalculatorError(f"{what} is not a number")
    if abs(value) > MAX_ABS_VALUE:
        raise CalculatorError(f"{what} is too large (the limit is ±1e{MAX_VALUE_DIGITS})")
    return value


# --- finding an expression in natural text -------------------------------------------

# Dates are three unspaced numbers joined by the same "-" or "/": year first
# (2024-01-05, 2024/1/5) or a 2- or 4-digit year last (05-01-2024, 1/5/24).
_DATE = re.compile(
    r"(?<![\w.,/-])(?:[0-9]{4}([-/])[0-9]{1,2}\1[0-9]{1,2}|[0-9]{1,2}([-/])[0-9]{1,2}\2(?:[0-9]{4}|[0-9]{2}))(?![\w/-])"
)
# A "word" that is not a number or an "x" operator ("mp3", "2nd", "x86", "max") hides
# the digits in it.
_WORD = re.compile(r"\w+")
_NUMERIC_WORD = re.compile(r"[0-9]+(?:[xX][0-9]+)*|[xX]")
_BARRIER = "\0"
# Numbers are not part of a version, an IP address or a comma-grouped number.
_TOKEN = re.compile(
    r"(?P<num>(?<![0-9.,])[0-9]+(?:\.[0-9]+)?(?![0-9]|[.,][0-9]))"
    r"|(?P<op>\*\*|//|[-+*/%^×÷xX])"
    r"|(?P<lpar>\()|(?P<rpar>\))"
    r"|(?P<space>[ \t]+)"
    r"|(?P<other>.)",
    re.DOTALL,
)


def find_expression(text: str) -> str | None:
    """Return the first arithmetic expression in `text`, or None.

    The rule: an expression is a run of numbers (digits with an optional decimal part),
    operators (+ - * / // % ** ^ x × ÷) and balanced parentheses on one line, written so
    that `evaluate` can parse it, that contains at least one binary operator - so a lone
    number or a lone negative number is not one. A sign is unary only when attached to
    its operand ("5 - -3"). The leftmost such run is returned, extended as far as it
    goes, without surrounding spaces or unmatched parentheses; it may still fail to
    evaluate (division by zero, too long, too large). Ignored: dates (three
    unspaced numbers joined by the same "-" or "/" with a 4-digit year first or a 2- or
    4-digit year last: "2024-01-05", "1/5/24"), digits inside words ("mp3", "2nd"),
    versions and addresses ("1.2.3"), comma-grouped numbers ("1,000"), and a sign
    glued to a word ("COVID-19 + 2"). Ranges such as "10-20" do count as subtraction.
    """
    masked = _DATE.sub(lambda m: _BARRIER * len(m.group()), text)
    masked = _WORD.sub(lambda m: m.group() if _NUMERIC_WORD.fullmatch(m.group()) else _BARRIER * len(m.group()), masked)
    tokens = [m for m in _TOKEN.finditer(masked) if m.lastgroup != "space"]
    kinds = [m.lastgroup for m in tokens]
    count = len(tokens)
    # Longest match starting at each token, computed right to left in one pass (no
    # recursion, linear time): term_end/expr_end is the index after the match or -1;
    # *_binary says whether the match contains a binary operator.
    term_end = [-1] * (count + 1)
    term_binary = [False] * (count + 1)
    expr_end = [-1] * (count + 1)
    expr_binary = [False] * (count + 1)
    for i in range(count - 1, -1, -1):
        kind = kinds[i]
        if kind == "num":
            term_end[i] = i + 1
        elif kind == "op" and _is_attached_sign(tokens, i):
            term_end[i], term_binary[i] = term_end[i + 1], term_binary[i + 1]
        elif kind == "lpar":
            inner = expr_end[i + 1]
            if inner != -1 and inner < count and kinds[inner] == "rpar":
                term_end[i], term_binary[i] = inner + 1, expr_binary[i + 1]
        after = term_end[i]
        if after == -1:
            continue
        if after < count and kinds[after] == "op" and expr_end[after + 1] != -1:
            expr_end[i], expr_binary[i] = expr_end[after + 1], True
        else:
            expr_end[i], expr_binary[i] = after, term_binary[i]
    for i in range(count):
        if expr_binary[i] and _may_start(masked, tokens[i]):
            return text[tokens[i].start() : tokens[expr_end[i] - 1].end()]
    return None


def _is_attached_sign(tokens: list[re.Match[str]], i: int) -> bool:
    return tokens[i].group() in "+-" and i + 1 < len(tokens) and tokens[i + 1].start() == tokens[i].end()


def _may_start(masked: str, token: re.Match[str]) -> bool:
    # A sign glued to a word or a ")" is not the start of a new expression:
    # "COVID-19 + 2" yields neither "-19 + 2" nor "19 + 2".
    start = token.start()
    if token.lastgroup != "op":
        if start == 0 or masked[start - 1] not in "+-":
            return True
        start -= 1
    before = masked[start - 1] if start > 0 else " "
    return not (before.isalnum() or before in f"{_BARRIER}._)")
