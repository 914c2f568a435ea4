"""``e3orch evaluate``: run systems on a split and write ``DIR/metrics.json``."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from e3orch.commands.common import add_params_arg, params_from, resolve_pool_path
from e3orch.files import write_text_atomic


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--orchestrator", action="append", default=None,
                   help="system to evaluate (repeatable): heuristic | thrifty | tiered | upfront | sequential | random | "
                        "single:<executor> | all-single | policy checkpoint dir "
                        "(default: evaluate.baselines and every executor alone)")
    p.add_argument("--env", choices=("sim", "live"), default="sim")
    p.add_argument("--benchmark", action="append", default=None, help="live benchmark(s)")
    p.add_argument("--executors", default=None, help="executor pool YAML (default: evaluate.executors)")
    p.add_argument("--split", choices=("train", "eval", "val"), default=None,
                   help="default: evaluate.split; val: the sim validation split RL selects rounds on")
    p.add_argument("--limit", type=int, default=None, help="at most N tasks per benchmark/domain (0 = all)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", required=True, help="output folder for metrics.json and episodes.jsonl")
    p.add_argument("--json", action="store_true", help="also print metrics.json to stdout")


def expand_systems(names: list[str], pool_names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if n == "all-single":
            out += [f"single:{e}" for e in pool_names]
        else:
            out.append(n)
    return list(dict.fromkeys(out))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from e3orch.evaluation.evaluate import limit_per_benchmark, metrics_table, run_systems
    from e3orch.evaluation.report import render_table
    from e3orch.evaluation.systems import make_orchestrator
    from e3orch.executors.base import build_pool
    from e3orch.orchestration.types import Episode

    if args.benchmark and args.env != "live":
        raise ValueError("--benchmark names a live benchmark: add --env live")
    if args.limit is not None and args.limit < 0:
        raise ValueError(f"--limit must be >= 0 (0 = all tasks), got {args.limit}")
    params = params_from(args)
    ecfg = params.evaluate
    split = args.split or ecfg.split
    limit = ecfg.limit if args.limit is None else args.limit
    seed = ecfg.seed if args.seed is None else args.seed
    pool_path = resolve_pool_path(args.executors or (ecfg.executors if args.env == "sim" else "configs/executors/live_cpu.yaml"))
    pool = build_pool(pool_path)
    if args.env == "live":
        from e3orch.commands.common import live_tasks

        if not args.benchmark:
            raise ValueError("--env live needs --benchmark NAME (repeatable)")
        tasks = [t for b in args.benchmark for t in live_tasks(params, b) if t.split == split]
    else:
        from e3orch.commands.common import sim_tasks

        tasks = sim_tasks(params, split)
    tasks = limit_per_benchmark(tasks, limit)
    if not tasks:
        raise ValueError(f"no tasks in split {split!r}")
    systems = expand_systems(args.orchestrator or [*ecfg.baselines, "all-single"], pool.names)
    # fail fast on bad names; a policy decodes with this params file's policy section
    orchestrators = [make_orchestrator(s, pool, seed=seed, policy_options={"params": params}) for s in systems]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    # episodes stream into a side file; an interrupted run leaves the previous pair whole
    partial = out / "episodes.jsonl.partial"

    async def go() -> tuple[dict[str, list[Episode]], dict[str, int]]:
        with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            with partial.open("w") as f:
                def start(name: str) -> Callable[[Episode], None]:
                    bar = progress.add_task(name[:28], total=len(tasks))
                    return lambda _ep: progress.advance(bar)

                def write(name: str, eps: list[Episode]) -> None:
                    for ep in eps:
                        f.write(json.dumps({"system": name, **ep.to_dict()}) + "\n")

                try:
                    return await run_systems(zip(systems, orchestrators), tasks, pool, params.engine, seed=seed,
                                             on_start=start, on_system=write)
                finally:
                    await pool.aclose()

    results, redrawn = asyncio.run(go())
    metrics = metrics_table(results, redrawn)
    metrics["config"] = {"env": args.env, "split": split, "limit": limit, "seed": seed,
                         "executors": str(pool_path), "n_tasks": len(tasks)}
    partial.replace(out / "episodes.jsonl")
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    console.print(render_table(metrics["systems"]), soft_wrap=True)
    console.print(f"wrote {out / 'metrics.json'} and {out / 'episodes.jsonl'}")
    if args.json:
        print(json.dumps(metrics, indent=2))
    return 0
