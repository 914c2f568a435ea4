"""``e3orch prepare``: write the task tables (Parquet, pandera-validated) under data/."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from e3orch.commands.common import add_params_arg, params_from

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--out-dir", default=None, help="output folder (default: prepare.out_dir)")


def prepare(params, out_dir: str | None = None) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    from e3orch.data.sim import generate_split
    from e3orch.data.tasks import write_tasks

    cfg = params.prepare
    out = Path(out_dir or cfg.out_dir)
    written = {}
    for split, n in (("train", cfg.train_per_domain), ("eval", cfg.eval_per_domain), ("val", cfg.val_per_domain)):
        if not n:
            continue
        tasks = generate_split(cfg.seed, split, n, cfg.domains)
        written[split] = write_tasks(tasks, out / f"sim_{split}.parquet")
    return written


def run(args: argparse.Namespace) -> int:
    from e3orch.tracking import stage_run

    params = params_from(args)
    with stage_run("prepare", params) as tracker:
        written = prepare(params, args.out_dir)
        tracker.set_tags({f"e3orch.output.{split}": path for split, path in written.items()})
    for split, path in written.items():
        print(f"wrote {path} ({split})")
    return 0
