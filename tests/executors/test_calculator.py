"""The calculator: exact values, prose extraction, hostile input, and a property test against Fraction."""

from __future__ import annotations

import asyncio
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.executors.base import ConfigError, ExecutorSpec, SubtaskRequest, build_pool
from e3orch.executors.calculator import (
    CalcError,
    CalculatorExecutor,
    evaluate,
    extract_and_evaluate,
    format_value,
)


@pytest.mark.parametrize(
    ("expr", "value", "text"),
    [
        ("2 + 3 * 4", Fraction(14), "14"),
        ("(2 + 3) * 4", Fraction(20), "20"),
        ("0.1 + 0.2", Fraction(3, 10), "0.3"),
        ("1/3", Fraction(1, 3), "0.333333333333333333333333333333 (= 1/3)"),
        ("7 / 8", Fraction(7, 8), "0.875"),
        ("-3.5 * 2", Fraction(-7), "-7"),
        ("--3", Fraction(3), "3"),
        ("2**100", Fraction(2**100), "1267650600228229401496703205376"),
        ("2^10", Fraction(1024), "1024"),
        ("12 × 3 ÷ 4", Fraction(9), "9"),
        ("10**-3", Fraction(1, 1000), "0.001"),
        ("1e3 + 2.5e-1", Fraction(4001, 4), "1000.25"),
        ("-7 // 2", Fraction(-4), "-4"),
        ("-7 % 3", Fraction(2), "2"),
        ("99999999999999999999 * 99999999999999999999", Fraction(99999999999999999999**2), str(99999999999999999999**2)),
        ("sqrt(16/9)", Fraction(4, 3), "1.33333333333333333333333333333 (= 4/3)"),
        ("8**(1/3)", Fraction(2), "2"),
        ("abs(-2.5) + max(1, 7, 3) - min(4, 2)", Fraction(15, 2), "7.5"),
        ("round(2.675, 2)", Fraction(67, 25), "2.68"),  # exact 2.675 (a float would give 2.67)
        ("round(7/2)", Fraction(4), "4"),
        ("floor(-2.5) + ceil(2.1)", Fraction(0), "0"),
        ("1_000 * 3", Fraction(3000), "3000"),
    ],
)
def test_exact_values(expr: str, value: Fraction, text: str) -> None:
    v = evaluate(expr)
    assert v.exact and v.q == value
    assert format_value(v) == text


def test_irrational_results_are_marked_approximate() -> None:
    v = evaluate("sqrt(2)")
    assert not v.exact
    assert format_value(v).startswith("1.41421356237309504880168872") and format_value(v).endswith("(approximate)")
    assert not evaluate("2 ** 0.5 + 1").exact


@pytest.mark.parametrize(
    ("instruction", "expr", "text"),
    [
        ("What is 17 × 23?", "17 × 23", "391"),
        ("Compute (3 + 4) * 5 please.", "(3 + 4) * 5", "35"),
        ("How much is 2^64 - 1 exactly?", "2^64 - 1", "18446744073709551615"),
        ("Compute 3 + 4 (step 1 of 2).", "3 + 4", "7"),
        ("What is 42?", "42", "42"),
        ("so, total = 1.5 + 2.25 = ?", "1.5 + 2.25", "3.75"),
    ],
)
def test_expression_is_extracted_from_prose(instruction: str, expr: str, text: str) -> None:
    used, value = extract_and_evaluate(instruction)
    assert used == expr and format_value(value) == text


@pytest.mark.parametrize(
    ("instruction", "message"),
    [
        ("__import__('os').system('echo pwned')", "attribute access"),
        ("__import__('os')", "function '__import__' is not allowed"),
        ("().__class__.__bases__[0].__subclasses__()", "attribute access"),
        ("(1).real", "attribute access"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("[x for x in range(10)]", "unsupported syntax"),
        ("9**9**9", "result too large"),
        ("2**(10**9)", "result too large"),
        ("10**5000 * 10**5000 * 10**5000", "result too large"),
        ("1e999999", "too large"),
        ("-" * 500 + "1", "nested too deeply"),
        ("(" * 300 + "1" + ")" * 300, "nest"),
        ("1/0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0**-1", "division by zero"),
        ("sqrt(-4)", "negative"),
        ("(-8)**(1/3)", "complex"),
        ("True + 1", "unsupported literal"),
        ("'a' * 3", "unsupported literal"),
        ("1 if 2 else 3", "unsupported syntax"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("round(x)", "no arithmetic expression"),
        ("What is 15% of 80?", "could not read"),
        ("Add 2 and 3", "only separate numbers"),
        ("hello there", "no arithmetic expression"),
        ("1+" * 6000 + "1", "too long"),
    ],
)
def test_hostile_or_unsupported_input_is_rejected_cleanly(instruction: str, message: str) -> None:
    with pytest.raises(CalcError, match=None) as info:
        extract_and_evaluate(instruction)
    assert message in str(info.value)


def test_long_flat_sums_are_fine() -> None:
    assert evaluate("+".join(["1"] * 2000)).q == 2000


# ------------------------------------------------------------------ property test vs Fraction

_OPS = ["+", "-", "*", "/"]


def _leaf() -> st.SearchStrategy[tuple[str, Fraction]]:
    ints = st.integers(min_value=0, max_value=10**30).map(lambda n: (str(n), Fraction(n)))
    decimals = st.tuples(st.integers(0, 10**6), st.integers(0, 999)).map(
        lambda t: (f"{t[0]}.{t[1]:03d}", Fraction(t[0]) + Fraction(t[1], 1000))
    )
    return st.one_of(ints, decimals)


def _combine(children: st.SearchStrategy[tuple[str, Fraction | None]]) -> st.SearchStrategy[tuple[str, Fraction | None]]:
    def build(a: tuple[str, Fraction | None], op: str, b: tuple[str, Fraction | None]) -> tuple[str, Fraction | None]:
        (sa, va), (sb, vb) = a, b
        if va is None or vb is None:
            value = None
        elif op == "+":
            value = va + vb
        elif op == "-":
            value = va - vb
        elif op == "*":
            value = va * vb
        else:
            value = None if vb == 0 else va / vb
        return f"({sa} {op} {sb})", value

    binary = st.builds(build, children, st.sampled_from(_OPS), children)
    neg = children.map(lambda c: (f"-{c[0]}", None if c[1] is None else -c[1]))
    small_pow = st.builds(
        lambda c, n: (f"({c[0]})**{n}", None if c[1] is None or (c[1] == 0 and n < 0) else c[1] ** n),
        children.filter(lambda c: len(c[0]) < 40),
        st.integers(-3, 3),
    )
    return st.one_of(binary, neg, small_pow)


EXPRESSIONS = st.recursive(_leaf(), _combine, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(EXPRESSIONS)
def test_matches_fraction_arithmetic(case: tuple[str, Fraction | None]) -> None:
    expr, expected = case
    if expected is None:  # a division by zero somewhere (Fraction would raise too)
        with pytest.raises(CalcError, match="division by zero"):
            evaluate(expr)
        return
    try:
        v = evaluate(expr)
    except CalcError as exc:  # only the size guard may refuse a valid expression
        assert "too large" in str(exc)
        return
    assert v.exact and v.q == expected
    text = format_value(v)
    if expected.denominator == 1:
        assert text == str(expected.numerator)


# ------------------------------------------------------------------ the executor


def _calc(**extra: object) -> CalculatorExecutor:
    spec = ExecutorSpec.model_validate(
        {"name": "calc", "kind": "calculator", "price": {"input_per_1k": 1.0, "output_per_1k": 2.0}, **extra}
    )
    return CalculatorExecutor(spec)


def test_executor_result_cost_and_failure() -> None:
    calc = _calc()
    ok = asyncio.run(calc.run(SubtaskRequest("t", "s1", "What is 2**64 - 1?")))
    assert ok.ok and ok.output == "18446744073709551615" and ok.error is None
    assert ok.input_tokens > 0 and ok.output_tokens > 0
    assert ok.cost == pytest.approx((ok.input_tokens * 1.0 + ok.output_tokens * 2.0) / 1000)
    assert ok.latency_s > 0
    bad = asyncio.run(calc.run(SubtaskRequest("t", "s2", "__import__('os').system('id')")))
    assert not bad.ok and bad.error is not None and bad.error.startswith("calculator: ")


def test_executor_rejects_options() -> None:
    with pytest.raises(ConfigError, match="takes no options"):
        build_pool([ExecutorSpec.model_validate({"name": "c", "kind": "calculator", "precision": 5})])
