"""``e3orch episode``: run one task with one orchestrator and print its trace."""

from __future__ import annotations

import argparse
import asyncio
import random
from typing import TYPE_CHECKING

from e3orch.commands.common import add_params_arg, params_from, print_json, resolve_pool_path

if TYPE_CHECKING:
    from e3orch.orchestration.types import Episode


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--env", choices=("sim", "live"), default="sim")
    p.add_argument("--domain", default=None, help="sim domain (default: the seed picks one)")
    p.add_argument("--benchmark", default=None, help="live benchmark (e.g. humaneval)")
    p.add_argument("--data", default=None, help="live benchmark file (default: live.sources or the packaged copy)")
    p.add_argument("--task-id", default=None, help="a specific task id")
    p.add_argument("--split", choices=("train", "eval", "val"), default="eval")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--orchestrator", default="heuristic",
                   help="heuristic | thrifty | tiered | upfront | sequential | random | single:<executor> | policy checkpoint dir")
    p.add_argument("--executors", default=None, help="executor pool YAML (default: evaluate.executors; live: configs/executors/live_cpu.yaml)")
    p.add_argument("--json", action="store_true", help="print the trace as JSON")


def pick_task(args: argparse.Namespace, params):  # type: ignore[no-untyped-def]
    if args.env == "live":
        from e3orch.commands.common import live_tasks

        if not args.benchmark:
            raise ValueError("--env live needs --benchmark NAME (e.g. humaneval)")
        tasks = live_tasks(params, args.benchmark, args.data)
    else:
        from e3orch.commands.common import sim_tasks

        if args.benchmark or args.data:
            raise ValueError("--benchmark and --data name a live benchmark: add --env live")
        tasks = sim_tasks(params, args.split)
        if args.domain is None and args.task_id is None:
            domains = sorted({t.domain for t in tasks})
            args.domain = random.Random(args.seed).choice(domains)
        if args.domain:
            known = ", ".join(sorted({t.domain for t in tasks}))
            tasks = [t for t in tasks if t.domain == args.domain]
            if not tasks:
                raise ValueError(f"--domain {args.domain}: no such domain in the {args.split} split; known: {known}")
    if args.task_id:
        match = [t for t in tasks if t.task_id == args.task_id]
        if not match:
            raise ValueError(f"no task {args.task_id!r} in {args.env} {args.benchmark or args.split}")
        return match[0]
    return tasks[random.Random(args.seed + 1).randrange(len(tasks))]


def run(args: argparse.Namespace) -> int:
    from e3orch.data.sim import stable_seed
    from e3orch.evaluation.systems import make_orchestrator
    from e3orch.executors.base import build_pool
    from e3orch.orchestration.episode import run_episode

    params = params_from(args)
    default_pool = "configs/executors/live_cpu.yaml" if args.env == "live" else params.evaluate.executors
    pool = build_pool(resolve_pool_path(args.executors or default_pool))
    task = pick_task(args, params)
    orch = make_orchestrator(args.orchestrator, pool, seed=args.seed, policy_options={"params": params})

    async def go():  # type: ignore[no-untyped-def]
        try:
            return await run_episode(task, orch, pool, params.engine, seed=stable_seed(args.seed, task.task_id))
        finally:
            await orch.aclose()
            await pool.aclose()

    ep = asyncio.run(go())
    if args.json:
        print_json(ep.to_dict())
        return 0
    print("\n".join(trace_lines(ep, args.orchestrator)))
    return 0


def trace_lines(ep: Episode, orchestrator: str) -> list[str]:
    """The plain-text trace: the task, each milestone's plan and results, every defect, the outcome."""
    lines = [f"task {ep.task_id} ({ep.benchmark}) with {orchestrator}", ep.question]
    for i, m in enumerate(ep.milestones, 1):
        lines.append(f"\nmilestone {i}: {m.text}")
        for s, r in zip(m.plan.subtasks, m.results):
            deps = ",".join(s.deps) or "-"
            status = "ok " if r.ok else "ERR"
            text = (r.output or r.error or "").replace("\n", " | ")[:100]
            lines.append(f"  {s.id} [{status}] {s.executor:<14} deps={deps:<6} cost={r.cost:7.4f} t={r.latency_s:6.2f}s  {text}")
        lines += [f"  defect: {d.code} {d.detail}" for d in m.plan.defects]
    shown = [d for m in ep.milestones for d in m.plan.defects]
    rest = [d for d in ep.defects if d not in shown]  # milestones that never became a plan, the answer, budgets
    if rest:
        lines += [""] + [f"defect: {d.code} {d.detail}" for d in rest]
    lines.append(f"\nanswer: {ep.answer!r}  correct={ep.correct}  score={ep.score:g}")
    lines.append(f"cost={ep.cost:.4f}  makespan={ep.makespan_s:.2f}s  serial={ep.serial_latency_s:.2f}s"
                 + (f"  budget_failure={ep.budget_failure}" if ep.budget_failure else ""))
    return lines
