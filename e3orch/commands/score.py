"""``e3orch score``: rewards and advantages for every decision node → scored.parquet (DVC stage)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from e3orch.commands.common import add_params_arg, params_from


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--rollouts", default=None, help="rollout folder (default: rollout.out_dir)")
    p.add_argument("--out", default=None, help="scored Parquet (default: <rollouts>/scored.parquet)")
    p.add_argument("--summary", default=None, help="optional JSON summary path")


def run(args: argparse.Namespace) -> int:
    from e3orch.rollout.stage import score_stage
    from e3orch.tracking import stage_run

    params = params_from(args)
    rollouts = Path(args.rollouts or params.rollout.out_dir)
    out = Path(args.out or rollouts / "scored.parquet")
    with stage_run("score", params) as tracker:
        summary = score_stage(params, rollouts, out)
        if args.summary:
            Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
            Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
            tracker.log_artifact(args.summary)
        tracker.log_metrics(summary)
    print(json.dumps(summary, indent=2))
    return 0
