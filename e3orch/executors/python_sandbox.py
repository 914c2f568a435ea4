"""The ``python`` executor: runs the instruction as Python code in :mod:`e3orch.executors.sandbox`.

The instruction *is* the code; if it contains fenced blocks (```` ```python ````), only those
blocks run, joined in order. Dependency outputs are visible to the code as a dict ``DEPS``
(subtask id → output text), defined on a line inserted before the code (after any
``from __future__`` imports, which must stay first). The output is the program's stdout; a
non-zero exit, a timeout, a limit or truncated output is a failed result carrying the
sandbox's error (and whatever stdout was produced).

Pool options (all optional): ``timeout_s`` (10), ``cpu_s`` (timeout + 1), ``memory_mb`` (512),
``max_procs`` (16), ``max_output_bytes`` (64000).

What this module deliberately does not do: install packages (only the standard library is
importable), keep state between calls, or let the code reach the network.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import time
from typing import Any

from e3orch.executors.base import ExecutionResult, Executor, ExecutorSpec, SubtaskRequest, register_executor
from e3orch.executors.prompting import estimate_tokens
from e3orch.executors.sandbox import run_python

log = logging.getLogger(__name__)

_OPTION_DEFAULTS: dict[str, Any] = {
    "timeout_s": 10.0,
    "cpu_s": None,
    "memory_mb": 512,
    "max_procs": 16,
    "max_output_bytes": 64_000,
}
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(instruction: str) -> str:
    """The code to run: the ```python blocks if any, else bare ``` blocks, else the whole text."""
    blocks = _FENCE_RE.findall(instruction)
    python_blocks = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python_blocks:
        return "\n".join(python_blocks)
    bare = [body for lang, body in blocks if not lang]
    if bare:
        return "\n".join(bare)
    return instruction


def with_deps(code: str, deps: dict[str, str]) -> str:
    """``code`` with a ``DEPS = {...}`` line inserted where Python allows it."""
    line = f"DEPS = {deps!r}\n"
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return line + code  # the sandbox reports the syntax error itself
    insert_at = 0  # after the docstring and ``from __future__`` imports, which must come first
    for i, node in enumerate(tree.body):
        is_doc = i == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)
        if is_doc or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            insert_at = node.end_lineno or insert_at
        else:
            break
    lines = code.splitlines(keepends=True)
    if insert_at and lines and not lines[insert_at - 1].endswith("\n"):
        lines[insert_at - 1] += "\n"
    return "".join(lines[:insert_at]) + line + "".join(lines[insert_at:])


@register_executor("python")
class PythonSandboxExecutor(Executor):
    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        opts = spec.options
        unknown = set(opts) - set(_OPTION_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for kind python; known: {sorted(_OPTION_DEFAULTS)}")
        o = {**_OPTION_DEFAULTS, **opts}
        try:
            self.limits: dict[str, Any] = {
                "timeout_s": float(o["timeout_s"]),
                "cpu_s": None if o["cpu_s"] is None else float(o["cpu_s"]),
                "memory_mb": int(o["memory_mb"]),
                "max_procs": int(o["max_procs"]),
                "max_output_bytes": int(o["max_output_bytes"]),
            }
        except (TypeError, ValueError):
            raise ValueError(f"python executor options must be numbers, got {opts}") from None
        if self.limits["timeout_s"] <= 0 or self.limits["memory_mb"] < 32 or self.limits["max_procs"] < 1:
            raise ValueError("timeout_s must be > 0, memory_mb >= 32 and max_procs >= 1")

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        code = with_deps(extract_code(request.instruction), dict(request.context))
        t0 = time.perf_counter()
        try:
            # A thread per call: the sandbox blocks on its subprocess, and calls may overlap.
            res = await asyncio.to_thread(run_python, code, **self.limits)
        except Exception as exc:  # could not start the sandbox at all: a failed call, never a crash
            log.exception("python executor %s: sandbox failed to start", self.name)
            return self.failure(request, f"sandbox error: {type(exc).__name__}: {exc}", time.perf_counter() - t0)
        latency = time.perf_counter() - t0
        n_in, n_out = estimate_tokens(code), estimate_tokens(res.stdout + res.stderr)
        output = res.stdout.rstrip("\n")
        return ExecutionResult(
            id=request.subtask_id,
            executor=self.name,
            ok=res.ok,
            output=output,
            cost=self.spec.cost(n_in, n_out),
            latency_s=latency,
            error=None if res.ok else _error_text(res.error, res.stderr),
            input_tokens=n_in,
            output_tokens=n_out,
        )


def _error_text(error: str | None, stderr: str) -> str:
    # The sandbox's error names the cause; the last stderr line usually names the exception.
    err = error or "failed"
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    if last and last not in err:
        err += f" | {last[:300]}"
    return err
