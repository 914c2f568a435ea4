"""``e3orch warmstart``: demonstrations of the hand-written orchestrators → SFT → models/warmstart."""

from __future__ import annotations

import argparse

from e3orch.commands.common import (
    add_params_arg,
    params_from,
    report_path,
    resolve_pool_path,
    sim_tasks,
    write_stage_json,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--executors", default=None, help="pool whose randomised variants the demos use (default: evaluate.executors)")
    p.add_argument("--out", default=None, help="output folder (default: warmstart.out_dir)")
    p.add_argument("--metrics", default=None,
                   help="where to write the stage summary (default: warmstart.json in evaluate.out_dir)")


def run(args: argparse.Namespace) -> int:
    from e3orch.executors.base import load_pool_specs
    from e3orch.progress import step_progress
    from e3orch.tracking import is_main_process, stage_run
    from e3orch.training.warmstart import warmstart

    params = params_from(args)
    metrics = report_path(params, args.metrics, "warmstart.json")
    pool_path = resolve_pool_path(args.executors or params.evaluate.executors)
    specs = load_pool_specs(pool_path)
    with stage_run("warmstart", params) as tracker:
        with step_progress("warm start (SFT)") as on_step:
            cfg = params.warmstart  # warmstart.select: best validates only when there are rounds to choose among
            val = sim_tasks(params, "val") if cfg.select == "best" and cfg.dagger_rounds and params.prepare.val_per_domain else []
            out, stats, info = warmstart(params, sim_tasks(params, "train"), specs, out_dir=args.out, on_step=on_step,
                                         val_tasks=val)
        if not is_main_process():  # one metrics file and one report per run
            return 0
        write_stage_json(metrics, {**info, "losses": stats.losses})
        tracker.log_metrics(info)
        for r in info["corrections"]:  # correction_policy_accuracy, correction_agreement, ... at step=round
            tracker.log_metrics({f"correction_{k}": v for k, v in r.items() if k != "round"}, step=r["round"])
        for v in info.get("validation", []):  # warmstart.select: best, at step=round (0: after cloning)
            tracker.log_metrics({"validation_accuracy": v["val_accuracy"], "validation_cost": v["val_cost"]}, step=v["round"])
        tracker.log_curve("sft_loss", stats.losses)
        tracker.log_artifact(metrics)
        tracker.log_pool(pool_path)
        tracker.log_policy(out, name="warmstart")
    print(f"wrote {out}: {info['demonstrations']} demonstrations from {info['teacher_episodes']} teacher episodes, "
          f"{stats.steps} steps, final loss {stats.final_loss:.3f}, {stats.seconds:.0f}s")
    if info["plan_steps"]:
        print(f"before that, the plan questions alone (warmstart.plan_epochs): {info['plan_steps']} steps, "
              f"{info['plan_seconds']:.0f}s")
    for r in info["corrections"]:
        print(f"correction round {r['round']}: the policy ran {r['tasks']} tasks (accuracy {r['policy_accuracy']:.3f}, "
              f"cost {r['policy_cost']:.3f}) and agreed with its teachers on {r['agreement']:.0%} of {r['decisions']} "
              f"decisions; {r['steps']} steps, final loss {r['final_loss']:.3f}, {r['seconds']:.0f}s")
    if "kept_round" in info:  # warmstart.select: best
        figures = ", ".join(f"{'cloning' if v['round'] == 0 else 'round ' + str(v['round'])} {v['val_accuracy']:.3f} / "
                            f"{v['val_cost']:.3f}" for v in info["validation"])
        kept = "the weights after cloning" if info["kept_round"] == 0 else f"the weights after correction round {info['kept_round']}"
        print(f"validation accuracy / cost: {figures}; wrote {kept}")
    return 0
