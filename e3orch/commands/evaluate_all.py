"""``e3orch evaluate-all``: the evaluate stage — every system on the training, transfer and generated pools → reports/."""

from __future__ import annotations

import argparse

from e3orch.commands.common import add_params_arg, params_from, resolve_pool_path, sim_tasks


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--policy", default=None, help="trained policy (default: train.out_dir)")
    p.add_argument("--warmstart", default=None, help="warm-start policy (default: warmstart.out_dir)")
    p.add_argument("--out", default=None, help="output folder (default: evaluate.out_dir)")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from rich.console import Console

    from e3orch.evaluation.report import render_table
    from e3orch.evaluation.stage import evaluate_stage
    from e3orch.progress import count_progress
    from e3orch.tracking import stage_run

    params = params_from(args)
    policies = {"e3orch": args.policy or params.train.out_dir, "warmstart": args.warmstart or params.warmstart.out_dir}
    for name, given in (("--policy", args.policy), ("--warmstart", args.warmstart)):
        if given and not Path(given).exists():
            raise FileNotFoundError(f"{name} {given}: no such policy folder")
    for name, path in policies.items():
        if not Path(path).exists():
            print(f"evaluate-all: no {name} policy at {path}; evaluating without it", file=sys.stderr)
    tasks = sim_tasks(params, params.evaluate.split)
    from e3orch.evaluation.stage import system_names
    from e3orch.executors.base import load_pool_specs

    pools = (params.evaluate.executors, params.evaluate.transfer_executors)
    n_systems = sum(len(system_names(params, [s.name for s in load_pool_specs(resolve_pool_path(p))], policies))
                    for p in pools)
    n_systems += params.evaluate.generated_pools * len(system_names(params, [], policies, singles=False))
    out_dir = args.out or params.evaluate.out_dir
    with stage_run("evaluate", params) as tracker:
        with count_progress("evaluating systems", n_systems) as advance:
            metrics = evaluate_stage(params, tasks, policies, out_dir, on_system=advance)
        tracker.log_evaluation(metrics, out_dir)
        tracker.log_pool(resolve_pool_path(params.evaluate.executors))
        tracker.log_pool(resolve_pool_path(params.evaluate.transfer_executors))
    console = Console()
    console.print("default pool", style="bold")
    console.print(render_table(metrics["systems"]), soft_wrap=True)
    console.print("transfer pool", style="bold")
    console.print(render_table(metrics["transfer"]["systems"]), soft_wrap=True)
    if "generated" in metrics:
        console.print(f"generated pools (never seen in any form; {len(metrics['generated']['pools'])} pools together)",
                      style="bold")
        console.print(render_table(metrics["generated"]["systems"]), soft_wrap=True)
    targets = metrics.get("targets") or {}
    if targets.get("judged"):
        from e3orch.evaluation.targets import describe

        console.print(f"training targets: {targets['met']} of {targets['judged']} met", style="bold")
        for name, verdict, figures in describe(targets):
            console.print(f"  {verdict:>3}  {name}: {figures}", soft_wrap=True)
    console.print(f"wrote {args.out or params.evaluate.out_dir}/metrics.json and report.md")
    return 0
