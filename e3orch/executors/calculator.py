"""The ``calculator`` executor: exact arithmetic on one expression in the instruction.

Numbers are :class:`fractions.Fraction` throughout, so ``0.1 + 0.2`` is exactly ``0.3`` and
integers have arbitrary size. Supported: ``+ - * / // % **`` (``^`` is read as ``**``; ``×``
and ``÷`` as ``*`` and ``/``), parentheses, unary signs, decimal and scientific literals, and
the functions ``sqrt abs min max round floor ceil``. ``sqrt`` and fractional powers are exact
when the result is rational (``sqrt(16/9)`` is ``4/3``) and otherwise approximated to 50
significant digits and marked "approximate".

The expression is parsed with :mod:`ast` and only whitelisted nodes are evaluated — there is no
``eval``/``exec`` anywhere. Results are bounded (``MAX_DIGITS`` digits, checked *before* a power
is computed, so ``9**9**9`` fails at once), as are expression length and nesting depth.

If the instruction is not itself an expression (``"What is 17 * 23?"``), the longest
arithmetic-looking span in it is used.

What this module deliberately does not do: variables, equations, units, complex numbers,
trigonometry, or guessing at prose ("seventeen times three").
"""

from __future__ import annotations

import ast
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from e3orch.executors.base import ExecutionResult, Executor, ExecutorSpec, SubtaskRequest, register_executor
from e3orch.executors.prompting import estimate_tokens

MAX_DIGITS = 10_000  # decimal digits of any numerator or denominator
MAX_EXPR_CHARS = 10_000
MAX_DEPTH = 100  # nesting of brackets, calls, unary signs and right-associative powers
APPROX_DIGITS = 50  # significant digits of irrational results
SHOW_DIGITS = 30  # significant digits shown for non-terminating decimals
_LOG2_10 = math.log2(10)


class CalcError(ValueError):
    """The expression is invalid, unsupported or too large; the message says which."""


@dataclass(frozen=True)
class Value:
    """A number and whether it is exact (False once an irrational result was approximated)."""

    q: Fraction
    exact: bool = True


def _check_size(q: Fraction) -> Fraction:
    bits = max(q.numerator.bit_length(), q.denominator.bit_length())
    if bits > MAX_DIGITS * _LOG2_10:
        raise CalcError(f"result too large (more than {MAX_DIGITS} digits)")
    return q


def _digits(n: int) -> float:
    return n.bit_length() / _LOG2_10 if n else 0.0


def _int_root(n: int, k: int) -> int | None:
    """The exact integer k-th root of n >= 0, or None when n is not a perfect k-th power."""
    if n < 2:
        return n
    if k == 2:
        r = math.isqrt(n)
    else:
        # Newton iteration on integers, from above: converges to floor(n ** (1/k)).
        r = 1 << ((n.bit_length() + k - 1) // k)
        while True:
            y = ((k - 1) * r + n // r ** (k - 1)) // k
            if y >= r:
                break
            r = y
    return r if r**k == n else None


def _approx(q: Fraction) -> Decimal:
    return Decimal(q.numerator) / Decimal(q.denominator)


def _power(base: Value, exp: Value) -> Value:
    b, e = base.q, exp.q
    if e.denominator == 1:
        n = e.numerator
        if b == 0 and n < 0:
            raise CalcError("division by zero (0 to a negative power)")
        if b.numerator in (0, 1, -1) and b.denominator == 1:
            return Value(b**n, base.exact)
        # digits of the result ~ |n| * digits(base): refuse before computing anything huge
        est = abs(n) * max(_digits(b.numerator), _digits(b.denominator))
        if est > MAX_DIGITS + 1:
            raise CalcError(f"result too large (about {est:.0f} digits; limit {MAX_DIGITS})")
        return Value(_check_size(b**n), base.exact and exp.exact)
    # fractional exponent p/q: exact when the q-th root of the base is rational
    if b < 0:
        raise CalcError("fractional power of a negative number (complex result)")
    p, q = e.numerator, e.denominator
    if q <= 64:
        num, den = _int_root(b.numerator, q), _int_root(b.denominator, q)
        if num is not None and den is not None:
            return _power(Value(Fraction(num, den), base.exact), Value(Fraction(p), exp.exact))
    if b == 0:
        return Value(Fraction(0), base.exact and exp.exact)
    est = abs(float(e)) * max(_digits(b.numerator), _digits(b.denominator))
    if est > MAX_DIGITS:
        raise CalcError(f"result too large (about {est:.0f} digits; limit {MAX_DIGITS})")
    with localcontext() as ctx:
        ctx.prec = APPROX_DIGITS
        approx = _approx(b) ** _approx(e)
    return Value(_check_size(Fraction(approx)), False)


def _sqrt(x: Value) -> Value:
    if x.q < 0:
        raise CalcError("sqrt of a negative number")
    return _power(x, Value(Fraction(1, 2)))


def _round(x: Value, ndigits: Value | None = None) -> Value:
    if ndigits is None:
        return Value(Fraction(round(x.q)), x.exact)
    if ndigits.q.denominator != 1 or abs(ndigits.q) > MAX_DIGITS:
        raise CalcError("round() needs an integer number of digits")
    return Value(Fraction(round(x.q, int(ndigits.q))), x.exact)


_FUNCS: dict[str, tuple[Callable[..., Value], int, int]] = {
    # name: (implementation, min args, max args)
    "sqrt": (_sqrt, 1, 1),
    "abs": (lambda x: Value(abs(x.q), x.exact), 1, 1),
    "min": (lambda *xs: min(xs, key=lambda v: v.q), 1, 100),
    "max": (lambda *xs: max(xs, key=lambda v: v.q), 1, 100),
    "round": (_round, 1, 2),
    "floor": (lambda x: Value(Fraction(math.floor(x.q)), x.exact), 1, 1),
    "ceil": (lambda x: Value(Fraction(math.ceil(x.q)), x.exact), 1, 1),
}


def _binop(op: ast.operator, a: Value, b: Value) -> Value:
    exact = a.exact and b.exact
    if isinstance(op, ast.Add):
        return Value(_check_size(a.q + b.q), exact)
    if isinstance(op, ast.Sub):
        return Value(_check_size(a.q - b.q), exact)
    if isinstance(op, ast.Mult):
        return Value(_check_size(a.q * b.q), exact)
    if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
        if b.q == 0:
            raise CalcError("division by zero")
        if isinstance(op, ast.Div):
            return Value(_check_size(a.q / b.q), exact)
        if isinstance(op, ast.FloorDiv):
            return Value(Fraction(a.q // b.q), exact)
        return Value(_check_size(a.q % b.q), exact)
    if isinstance(op, ast.Pow):
        return _power(a, b)
    raise CalcError(f"operator {type(op).__name__} is not supported")


class _Evaluator:
    def __init__(self, source: str) -> None:
        self.source = source

    def eval(self, node: ast.AST, depth: int = 0) -> Value:
        if depth > MAX_DEPTH:
            raise CalcError(f"expression nested too deeply (limit {MAX_DEPTH})")
        if isinstance(node, ast.Expression):
            return self.eval(node.body, depth + 1)
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = self.eval(node.operand, depth + 1)
            return Value(-v.q, v.exact) if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            # Walk the left spine iteratively: ``1+2+...+n`` nests n deep but is not "deep".
            chain: list[ast.BinOp] = []
            while isinstance(node, ast.BinOp):
                chain.append(node)
                node = node.left
            acc = self.eval(node, depth + 1)
            for op_node in reversed(chain):
                acc = _binop(op_node.op, acc, self.eval(op_node.right, depth + 1))
            return acc
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Attribute):
            raise CalcError("attribute access is not allowed")
        if isinstance(node, ast.Name):
            raise CalcError(f"unknown name {node.id!r} (no variables; functions: {', '.join(_FUNCS)})")
        raise CalcError(f"unsupported syntax: {type(node).__name__}")

    def _constant(self, node: ast.Constant) -> Value:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalcError(f"unsupported literal {node.value!r}")
        if isinstance(node.value, int):
            return Value(_check_size(Fraction(node.value)))
        # Exact decimal from the source text ("0.1" is 1/10, not the binary float).
        text = (ast.get_source_segment(self.source, node) or repr(node.value)).replace("_", "")
        _mantissa, _, exp = text.lower().partition("e")
        if exp.lstrip("+-").isdigit() and abs(int(exp)) > MAX_DIGITS:
            raise CalcError(f"number literal too large: {text[:40]}")
        try:
            q = Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise CalcError(f"bad number literal {text[:40]!r}") from None
        return Value(_check_size(q))

    def _call(self, node: ast.Call, depth: int) -> Value:
        if not isinstance(node.func, ast.Name):
            raise CalcError("only plain function calls are allowed (no attribute access)")
        name = node.func.id
        if name not in _FUNCS:
            raise CalcError(f"function {name!r} is not allowed; allowed: {', '.join(_FUNCS)}")
        if node.keywords:
            raise CalcError(f"{name}() takes no keyword arguments")
        fn, lo, hi = _FUNCS[name]
        if not lo <= len(node.args) <= hi or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalcError(f"{name}() takes {lo}{'' if lo == hi else f' to {hi}'} argument(s)")
        return fn(*(self.eval(a, depth + 1) for a in node.args))


def _normalise(expr: str) -> str:
    expr = expr.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    return expr.strip().rstrip("=?").strip()


def evaluate(expr: str) -> Value:
    """Evaluate one arithmetic expression exactly; raises :class:`CalcError` on anything else."""
    src = _normalise(expr)
    if not src:
        raise CalcError("empty expression")
    if len(src) > MAX_EXPR_CHARS:
        raise CalcError(f"expression too long ({len(src)} characters; limit {MAX_EXPR_CHARS})")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as exc:
        if "too many nested" in str(exc.msg):
            raise CalcError("expression nested too deeply") from None
        raise CalcError(f"not an arithmetic expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise CalcError("expression nested too deeply") from None
    try:
        return _Evaluator(src).eval(tree)
    except RecursionError:
        raise CalcError("expression nested too deeply") from None


def format_value(v: Value) -> str:
    """Integers as integers; terminating decimals exactly; others to 30 digits with the fraction."""
    q = v.q
    if not v.exact:
        with localcontext() as ctx:
            ctx.prec = SHOW_DIGITS
            return f"{+_approx(q):f} (approximate)" if abs(q) < 10**SHOW_DIGITS else f"{+_approx(q)} (approximate)"
    if q.denominator == 1:
        return str(q.numerator)
    den = q.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den == 1:  # terminating decimal: print it exactly
        places = max(twos, fives)
        scaled = abs(q.numerator) * 10**places // q.denominator
        sign = "-" if q < 0 else ""
        digits = str(scaled).rjust(places + 1, "0")
        return f"{sign}{digits[:-places]}.{digits[-places:]}"
    with localcontext() as ctx:
        ctx.prec = SHOW_DIGITS
        dec = +_approx(q)
    return f"{dec} (= {q.numerator}/{q.denominator})"


# An arithmetic-looking span: digits, operators, brackets, spaces and the allowed function names.
_SPAN_RE = re.compile(
    r"(?:\b(?:" + "|".join(_FUNCS) + r")\b|[0-9.()+\-*/%^×÷−,\s]|(?<=\d)[eE](?=[+-]?\d)|(?<=\d)_(?=\d))+"
)


_OPERATOR_RE = re.compile(r"(?<=\S)\s*[-+*/%^×÷−]")


def _tidy(span: str) -> str:
    # Prose punctuation at the edges: "3 + 4 (" in "3 + 4 (step 1)", ", 2 * 5" in "so, 2 * 5".
    prev = None
    while span != prev:
        prev = span
        span = span.strip().rstrip(",(+-*/^×÷−").lstrip(",)*/%^×÷")
    return span.strip()


def candidate_spans(text: str) -> list[str]:
    """Arithmetic-looking spans of ``text`` that contain a digit, longest first."""
    spans = {_tidy(m.group(0)) for m in _SPAN_RE.finditer(text)}
    return sorted((s for s in spans if any(c.isdigit() for c in s)), key=lambda s: (-len(s), s))


# Constructs that only code has: an instruction containing one is code, not prose.
_CODE_NODES = (
    ast.Attribute, ast.Subscript, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
    ast.List, ast.Dict, ast.Set, ast.Starred, ast.NamedExpr, ast.JoinedStr, ast.Await, ast.Yield,
)


def _is_expression(text: str) -> bool:
    """Whether ``text`` as a whole is meant as an expression: it parses, and it either has code
    constructs (``(1).real``, lambdas) or every bare name in it is called (``sqrt(2)``,
    ``__import__('os')``), so prose that happens to parse (``What is 17*23``) is not taken for one."""
    try:
        tree = ast.parse(_normalise(text), mode="eval")
    except SyntaxError as exc:
        return "too many nested" in str(exc.msg)  # let evaluate() report it
    except (RecursionError, MemoryError):
        return True
    nodes = list(ast.walk(tree))
    if any(isinstance(n, _CODE_NODES) for n in nodes):
        return True
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    return all(id(n) in called for n in nodes if isinstance(n, ast.Name))


def extract_and_evaluate(instruction: str) -> tuple[str, Value]:
    """The expression used and its value: the whole instruction if it is one, else the longest span."""
    whole = instruction.strip()
    if len(whole) > MAX_EXPR_CHARS:
        raise CalcError(f"instruction too long ({len(whole)} characters; limit {MAX_EXPR_CHARS})")
    if _is_expression(whole):
        return whole, evaluate(whole)  # errors here (a forbidden call, too large) are the answer
    spans = candidate_spans(instruction)
    for span in spans:
        if len(spans) > 1 and not (_OPERATOR_RE.search(span) or "(" in span):
            # Only separate numbers ("Add 2 and 3"): picking one would be a guess.
            raise CalcError(f"no arithmetic expression found, only separate numbers: {', '.join(spans[:5])}")
        try:
            return span, evaluate(span)
        except CalcError as exc:
            if "not an arithmetic expression" not in str(exc):
                raise  # it parsed: division by zero, too large, ... is the answer
            if _OPERATOR_RE.search(span):
                # An operation we cannot read ("15% of 80"): answering with a shorter span
                # ("80") would be a confident wrong answer.
                raise CalcError(f"could not read an expression from {span[:80]!r} (no words or units)") from None
    raise CalcError("no arithmetic expression found in the instruction")


@register_executor("calculator")
class CalculatorExecutor(Executor):
    """Exact arithmetic; takes no options."""

    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        if spec.options:
            raise ValueError(f"kind calculator takes no options, got {sorted(spec.options)}")

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        t0 = time.perf_counter()
        n_in = estimate_tokens(request.instruction)
        try:
            expr, value = extract_and_evaluate(request.instruction)
        except CalcError as exc:
            latency = time.perf_counter() - t0
            return self.failure(request, f"calculator: {exc}", latency, cost=self.spec.cost(n_in, 0))
        output = format_value(value)
        return self.success(request, output, input_tokens=n_in, output_tokens=estimate_tokens(output),
                            latency_s=time.perf_counter() - t0)
