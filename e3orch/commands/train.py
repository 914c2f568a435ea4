"""``e3orch train``: RL rounds from the warm start → models/policy (resumes from checkpoints)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from e3orch.commands.common import (
    add_params_arg,
    params_from,
    report_path,
    resolve_pool_path,
    sim_tasks,
    validation_tasks,
    write_stage_json,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--init", default=None, help="warm-start policy (default: warmstart.out_dir)")
    p.add_argument("--scored", default=None, help="scored decisions of the warm start (the score stage) used as round 1")
    p.add_argument("--leaves", default=None, help="the leaves of that rollout (for round 1's metrics)")
    p.add_argument("--executors", default=None, help="pool whose randomised variants RL uses (default: evaluate.executors)")
    p.add_argument("--out", default=None, help="output folder (default: train.out_dir)")
    p.add_argument("--no-resume", action="store_true", help="ignore checkpoints and start from the warm start")
    p.add_argument("--metrics", default=None,
                   help="per-round metrics, the training curves (default: train_rounds.json in evaluate.out_dir)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from e3orch.executors.base import load_pool_specs
    from e3orch.progress import count_progress
    from e3orch.tracking import is_main_process, stage_run
    from e3orch.training.trainer import train_rl

    params = params_from(args)
    metrics = report_path(params, args.metrics, "train_rounds.json")
    pool_path = resolve_pool_path(args.executors or params.evaluate.executors)
    specs = load_pool_specs(pool_path)
    rounds = []
    warm_start_val: list[dict[str, Any]] = []  # the warm start's validation entry (round 0), when this run made it
    with stage_run("train", params) as tracker:
        with count_progress("RL rounds", params.train.rounds) as advance:
            def on_round(m):  # type: ignore[no-untyped-def]
                rounds.append(m.to_dict())
                tracker.log_round(m)
                advance(f"acc {m.accuracy:.2f} cost {m.cost:.2f} kl {m.kl:.3f}")

            out, history = train_rl(params, sim_tasks(params, "train"), specs, init_dir=args.init, out_dir=args.out,
                                    resume=not args.no_resume, on_round=on_round,
                                    on_validation=lambda v: warm_start_val.append(v) if v["round"] == 0 else None,
                                    first_scored=args.scored,
                                    first_leaves=args.leaves, val_tasks=validation_tasks(params))
        if not is_main_process():  # one metrics file and one report per run (round figures are pooled over processes)
            return 0
        write_stage_json(metrics, rounds)
        tracker.log_artifact(metrics)
        tracker.log_pool(pool_path)
        tracker.log_policy(out, name="policy")
    console = Console()
    meta = json.loads((Path(out) / "e3orch_policy.json").read_text())
    which = f"round {meta['rounds']}'s weights" + (" (0 = the warm start)" if meta["rounds"] == 0 else "")
    if "val_accuracy" in meta:
        which += f", validation accuracy {meta['val_accuracy']:.3f} at cost {meta['val_cost']:.3f}"
    console.print(f"wrote {out} after {params.train.rounds} rounds: {which}")

    def val_text(v: dict[str, Any]) -> str:
        text = f"val acc {v['val_accuracy']:.3f} cost {v['val_cost']:.3f}"
        pools = v.get("val_pools") or {}
        if len(pools) > 1:
            text += " (" + ", ".join(f"{k} {f['accuracy']:.3f} / {f['cost']:.3f}" for k, f in pools.items()) + ")"
        return text

    for v in warm_start_val:
        console.print(f"  warm start (round 0): {val_text(v)}", soft_wrap=True)
    for m in rounds:
        val = f"  {val_text(m)}" if "val_accuracy" in m else ""
        if "time_validate_s" in m:
            val += f"  in {m['time_validate_s']:.1f}s"
        if "kept" in m:  # train.hold_accuracy / hold_cost
            val += f"  w_cost {m['w_cost']:.3g} {'kept' if m['kept'] else 'undone'}"
        console.print(f"  round {m['round']:>2}: leaf acc {m['accuracy']:.3f}  cost {m['cost']:.3f}  reward {m['reward']:.3f}  "
                      f"kl {m['kl']:.4f}  gen {m['time_generate_s']:.1f}s  exec {m['time_execute_s']:.1f}s  "
                      f"update {m['time_update_s']:.1f}s  save {m.get('time_checkpoint_s', 0.0):.1f}s{val}", soft_wrap=True)
    return 0
