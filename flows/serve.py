"""Serve the pipeline as the Prefect deployment ``e3orch-pipeline/retrain`` on a cron schedule.

``python -m flows.serve [--cron "0 3 * * 1"] [--params params.yaml] [--shards 2]`` registers the
deployment (with its schedule) on the Prefect API named by ``PREFECT_API_URL`` and keeps a
runner polling for its scheduled runs; stop it with Ctrl-C (the schedule is paused then).
The default schedule is weekly, Monday 03:00 (``E3ORCH_RETRAIN_CRON`` or ``--cron`` change it).
Runs execute in this process's working directory, so start it from the repository root.

What this file deliberately does not do: define work pools or infrastructure (``prefect.yaml``
and ``prefect deploy`` do that for workers), or any pipeline logic.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from flows.pipeline import e3orch_pipeline

DEFAULT_CRON = "0 3 * * 1"  # weekly: Mondays at 03:00


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Serve the E³-Orch retraining deployment on a cron schedule.")
    p.add_argument("--name", default="retrain", help="deployment name")
    p.add_argument("--cron", default=os.environ.get("E3ORCH_RETRAIN_CRON", DEFAULT_CRON),
                   help=f"cron schedule (default: $E3ORCH_RETRAIN_CRON or {DEFAULT_CRON!r}, weekly)")
    p.add_argument("--timezone", default=os.environ.get("E3ORCH_RETRAIN_TZ", "UTC"))
    p.add_argument("--params", default="params.yaml", help="params file the scheduled runs use")
    p.add_argument("--shards", type=int, default=2, help="parallel rollout shards")
    args = p.parse_args(argv)
    from e3orch.config import load_params_file

    try:
        load_params_file(args.params)  # checked once here; each scheduled run reads the file again
    except (ValueError, OSError) as exc:
        p.error(str(exc))
    from prefect.schedules import Cron

    e3orch_pipeline.serve(
        name=args.name,
        schedule=Cron(args.cron, timezone=args.timezone),
        parameters={"params_path": str(Path(args.params).resolve()), "rollout_shards": args.shards},
        tags=["e3orch", "retrain"],
        description="Scheduled retraining: the whole E³-Orch pipeline on the current params.yaml.",
    )


if __name__ == "__main__":
    main()
