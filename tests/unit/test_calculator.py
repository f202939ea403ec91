from __future__ import annotations

import asyncio
import json
import time

import pytest

from services.runtime.calculator import (
    CALCULATOR_SCHEMA,
    MAX_EXPRESSION_LENGTH,
    CalculatorError,
    calculator_tool,
    evaluate,
    find_expression,
    format_number,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("17 * 23", 391),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("10 - 4 - 3", 3),
        ("2 ** 3 ** 2", 512),  # power is right-associative
        ("-2 ** 2", -4),  # power binds tighter than unary minus
        ("2 ** -1", 0.5),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-7 % 3", 2),
        ("+5 - -3", 8),
        ("2 ^ 10", 1024),
        ("3 x 4", 12),
        ("3x4", 12),
        ("3 × 4", 12),
        ("9 ÷ 2", 4.5),
        ("007 + 1", 8),
        ("  1 +\n 2 ", 3),
        ("123456789 * 987654321", 121932631112635269),
        ("10 ** 100", 10**100),
        ("(-8) ** 2.0", 64.0),
        ("1.5 * 4", 6.0),
    ],
)
def test_evaluate(expression: str, expected: float) -> None:
    assert evaluate(expression) == expected


def test_evaluate_keeps_int_and_float_apart() -> None:
    assert type(evaluate("2 ** 3")) is int
    assert type(evaluate("6 / 3")) is float
    assert type(evaluate("2.0 * 3")) is float


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (391, "391"),
        (-4, "-4"),
        (10**30, "1" + "0" * 30),
        (2.0, "2"),
        (-2.5, "-2.5"),
        (1 / 3, "0.333333333333"),
        (2 / 3, "0.666666666667"),
        (0.1 + 0.2, "0.3"),
        (123456.789, "123456.789"),
        (0.000012345, "0.000012345"),
        (1.5e13, "15000000000000"),
        (1e-7, "1e-07"),
        (1e20, "1e+20"),
        (-0.0, "0"),
    ],
)
def test_format_number(value: float, expected: str) -> None:
    assert format_number(value) == expected


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_format_number_rejects_non_finite(value: float) -> None:
    with pytest.raises(CalculatorError, match="not a finite number"):
        format_number(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("pi * 2", "unsupported name 'pi'"),
        ("abs(-1)", "unsupported function call"),
        ("max(1, 2)", "unsupported function call"),
        ("__import__('os')", "unsupported function call"),
        ("(1).real", "unsupported attribute access"),
        ("[1][0]", "unsupported indexing"),
        ("1 < 2", "unsupported comparison"),
        ("1 and 2", "unsupported boolean operator"),
        ("1, 2", "unsupported tuple"),
        ("1 if 1 else 2", "unsupported syntax IfExp"),
        ("True + 1", "booleans are not numbers"),
        ("1j * 2", "complex numbers are not supported"),
        ("'a' * 3", "only numbers are allowed, not str"),
        ("1 << 2", "unsupported operator LShift"),
        ("~1", "unsupported operator Invert"),
        ("9 ** 9 ** 9", "exponent 387420489 is too large"),
        ("2 ** 1001", "exponent 1001 is too large"),
        ("10 ** 101", "result is too large"),
        ("0.5 ** -1000", "result is too large"),
        ("(10 ** 60) * (10 ** 60)", "result is too large"),
        ("9" * 101, "number is too large"),
        ("1e400", "number is too large"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1 / 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** (1 / 3)", "negative number cannot be raised to a fractional power"),
        ("1+" * 100 + "1", "expression is too long (201 characters"),
        ("", "expression is empty"),
        ("   ", "expression is empty"),
        ("2 +", "not a valid arithmetic expression"),
        ("2x", "not a valid arithmetic expression"),
    ],
)
def test_evaluate_rejects(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace("*", r"\*")):
        evaluate(expression)


def test_structure_is_checked_before_computing() -> None:
    with pytest.raises(CalculatorError, match="function call"):
        evaluate("1 / 0 + abs(2)")


def test_huge_power_is_rejected_quickly() -> None:
    start = time.perf_counter()
    for expression in ("9**9**9", "10**10**10", "(10**100)**(10**100)", "2**999 * 2**999"):
        with pytest.raises(CalculatorError):
            evaluate(expression)
    assert time.perf_counter() - start < 0.5


def test_calculator_error_is_a_value_error() -> None:
    assert issubclass(CalculatorError, ValueError)


def test_limit_is_inclusive() -> None:
    expression = "1+" * 99 + "10"
    assert len(expression) == MAX_EXPRESSION_LENGTH
    assert evaluate(expression) == 109


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is 17 * 23?", "17 * 23"),
        ("compute (2+3)*4 please", "(2+3)*4"),
        ("3.5 / 7", "3.5 / 7"),
        ("-5 + 3", "-5 + 3"),
        ("what's 2+2.", "2+2"),
        ("5 - -3", "5 - -3"),
        ("2 x 3 and 2x3", "2 x 3"),
        ("2×3÷4", "2×3÷4"),
        ("2 ^ 10", "2 ^ 10"),
        ("10 % 3", "10 % 3"),
        ("100 // 7 then 3+3", "100 // 7"),
        ("((2+3)", "(2+3)"),
        ("(i.e. 2+2)", "2+2"),
        ("(1+2)-(3*4)", "(1+2)-(3*4)"),
        ("compute(2+3)*4", "(2+3)*4"),
        ("I have 2 cats and 3 + 4 dogs", "3 + 4"),
        ("on 2024-01-05 we spent 30 * 4", "30 * 4"),
        ("1/2/3", "1/2/3"),
        ("pages 10-20", "10-20"),  # documented: ranges count as subtraction
    ],
)
def test_find_expression(text: str, expected: str) -> None:
    assert find_expression(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I have 2 cats",
        "-5",
        "what is -5?",
        "(5)",
        "(-5)",
        "2024-01-05",
        "2024-12-25",
        "05/01/2024",
        "1/5/24",
        "meet at 10:30",
        "version 1.2.3",
        "1,000 + 5",
        "mp3 + 4",
        "2nd + 3rd",
        "COVID-19 + 2",
        "x-1+2",
        "5 - - 3",
        "2 * * 3",
        "sum 2+",
        "2\n+3",
        "",
        "no numbers here",
    ],
)
def test_find_expression_ignores(text: str) -> None:
    assert find_expression(text) is None


def test_found_expressions_parse() -> None:
    for text in ("What is 17 * 23?", "2 x 3", "2×3÷4", "007 + 1 please", "2^3^2", "5 - -3"):
        expression = find_expression(text)
        assert expression is not None
        evaluate(expression)


def _cpu_seconds(text: str, scans: int = 1) -> float:
    """This thread's CPU time per scan, for the fastest of five rounds of `scans` scans: other processes
    and threads do not count, and rounds of about the same length meet the same contention for caches."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for _ in range(scans):
            assert find_expression(text) is None
        best = min(best, (time.thread_time() - start) / scans)
    return best


@pytest.mark.parametrize(("unit", "repeats"), [("(1+", 30_000), ("(((((((((1 ]", 20_000), ("1 ", 100_000)])
def test_find_expression_is_linear_on_hostile_input(unit: str, repeats: int) -> None:
    # Ten times the input: about ten times the CPU when linear, a hundred when quadratic. The bound
    # sits between them with room for a loaded machine's noise (caches shared with other processes).
    small, large = _cpu_seconds(unit * (repeats // 10), scans=10), _cpu_seconds(unit * repeats)
    assert large < 35 * max(small, 0.002), f"{large:.3f}s for 10x the input of {small:.3f}s"


def test_schema() -> None:
    assert CALCULATOR_SCHEMA.name == "calculator"
    parameters = CALCULATOR_SCHEMA.parameters
    assert parameters["type"] == "object"
    assert parameters["required"] == ["expression"]
    assert parameters["properties"]["expression"]["type"] == "string"
    json.dumps(parameters)  # providers send it as JSON


def test_calculator_tool() -> None:
    assert asyncio.run(calculator_tool({"expression": "17 * 23"})) == "391"
    assert asyncio.run(calculator_tool({"expression": "7 / 2"})) == "3.5"
    assert asyncio.run(calculator_tool({"expression": "6 / 3"})) == "2"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument 'expression'"),
        ({"expression": 42}, "argument 'expression' must be a string, not int"),
        ({"expression": None}, "argument 'expression' must be a string, not NoneType"),
        ({"expression": "1+1", "mode": "exact"}, "unexpected argument"),
        ({"expression": "1/0"}, "division by zero"),
    ],
)
def test_calculator_tool_rejects(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(CalculatorError, match=message):
        asyncio.run(calculator_tool(arguments))
