"""``e3orch call``: run one executor of a pool on one subtask and print the result.

``e3orch call EXECUTOR (--instruction TEXT | --instruction-file PATH) [--executors PATH]
[--context ID=TEXT ...] [--json]`` prints ``{ok, output, cost, latency_s, error}`` (plus token
counts) as JSON with ``--json``, readable text otherwise. Only the named executor is built, so
a pool whose other entries need models or keys can still be used for its tools. Exit status:
0 when the call succeeded, 1 when it failed (the failure is in the output), 2 on bad input.

What this command deliberately does not do: plan, retry, or pass a task — simulated executors
called this way get ``task=None``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from e3orch.commands.common import print_json, resolve_pool_path
from e3orch.executors.base import ExecutionResult, Executor, SubtaskRequest, build_pool, load_pool_specs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("executor", help="executor name in the pool file")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--instruction", help="the subtask instruction (for the python executor: the code)")
    src.add_argument("--instruction-file", help="read the instruction from this file ('-' = stdin)")
    parser.add_argument(
        "--executors", default=None, help="executor pool file (default: configs/executors/default.yaml)"
    )
    parser.add_argument(
        "--context", action="append", default=[], metavar="ID=TEXT",
        help="output of a dependency, visible to the executor (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for stochastic executors")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _parse_context(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        dep_id, sep, text = item.partition("=")
        if not sep or not dep_id.strip():
            raise ValueError(f"--context expects ID=TEXT, got {item!r}")
        pairs.append((dep_id.strip(), text))
    return tuple(pairs)


def _instruction(args: argparse.Namespace) -> str:
    if args.instruction is not None:
        return str(args.instruction)
    if args.instruction_file == "-":
        return sys.stdin.read()
    return Path(args.instruction_file).read_text(encoding="utf-8")


def load_executor(name: str, pool_path: str | None) -> Executor:
    """Build just the executor ``name`` from a pool file; unknown names list the known ones."""
    path = resolve_pool_path(pool_path)
    specs = load_pool_specs(path)
    by_name = {s.name: s for s in specs}
    if name not in by_name:
        raise ValueError(f"no executor {name!r} in {path}; known: {', '.join(by_name)}")
    return build_pool([by_name[name]], source=str(path))[name]


async def call_executor(executor: Executor, request: SubtaskRequest) -> ExecutionResult:
    try:
        return await executor.run(request)
    finally:
        await executor.aclose()


def run(args: argparse.Namespace) -> int:
    instruction = _instruction(args)
    context = _parse_context(args.context)
    executor = load_executor(args.executor, args.executors)
    request = SubtaskRequest(
        task_id="call", subtask_id="s1", instruction=instruction, context=context, task=None, seed=args.seed
    )
    result = asyncio.run(call_executor(executor, request))
    if args.json:
        print_json({
            "ok": result.ok,
            "output": result.output,
            "cost": result.cost,
            "latency_s": result.latency_s,
            "error": result.error,
            "executor": result.executor,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
        })
    else:
        status = "ok" if result.ok else "FAILED"
        sys.stdout.write(
            f"{result.executor}: {status}  cost={result.cost:.6g}  latency={result.latency_s:.3f}s  "
            f"tokens={result.input_tokens}/{result.output_tokens}\n"
        )
        if result.error:
            sys.stdout.write(f"error: {result.error}\n")
        if result.output:
            sys.stdout.write(result.output.rstrip("\n") + "\n")
    return 0 if result.ok else 1
