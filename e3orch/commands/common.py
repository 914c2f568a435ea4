"""Helpers shared by the command modules: params, pools, task sources, JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from e3orch.config import Params, load_params, load_params_file
from e3orch.data.tasks import Task

DEFAULT_POOL = "configs/executors/default.yaml"


def add_params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, help="params file (default: ./params.yaml, all defaults when absent)")


def params_from(args: argparse.Namespace) -> Params:
    path = getattr(args, "params", None)
    return load_params("params.yaml") if path is None else load_params_file(path)


def resolve_pool_path(path: str | None) -> Path:
    """The pool file, relative to the working directory or, failing that, the package checkout."""
    p = Path(path or DEFAULT_POOL)
    if p.exists() or p.is_absolute():
        return p
    alt = Path(__file__).resolve().parents[2] / p
    return alt if alt.exists() else p


def sim_tasks(params: Params, split: str, domain: str | None = None) -> list[Task]:
    """Sim tasks of a split: the prepared Parquet when present, else generated (identically)."""
    from e3orch.data.sim import DOMAINS, generate_split
    from e3orch.data.tasks import read_tasks

    if domain and domain not in DOMAINS:
        raise ValueError(f"unknown sim domain {domain!r}; known: {', '.join(DOMAINS)}")
    cfg = params.prepare
    path = Path(cfg.out_dir) / f"sim_{split}.parquet"
    if path.exists():
        tasks = read_tasks(path)
    else:
        n = {"train": cfg.train_per_domain, "eval": cfg.eval_per_domain, "val": cfg.val_per_domain}[split]
        tasks = generate_split(cfg.seed, split, n, cfg.domains)
    return [t for t in tasks if domain is None or t.domain == domain]


def validation_tasks(params: Params) -> list[Task]:
    """The sim validation split RL's rounds run on (``train.validate_rounds``); none when it is off
    or empty (``train_rl`` then says what to set)."""
    return sim_tasks(params, "val") if params.train.validate_rounds and params.prepare.val_per_domain else []


def report_path(params: Params, given: str | None, name: str) -> str:
    """A stage summary's path: the one given, else ``name`` in ``evaluate.out_dir`` (``reports/``
    with params.yaml), so that a run with other params does not overwrite the pipeline's."""
    return given or str(Path(params.evaluate.out_dir) / name)


def write_stage_json(path: str | Path, obj: Any) -> None:
    """A training stage's JSON summary. Under torchrun / accelerate launch every process runs the
    stage; the commands call this from the main one only (``tracking.is_main_process``), since
    concurrent writes interleave."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2) + "\n")


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def live_tasks(params: Params, benchmark: str, source: str | None = None) -> list[Task]:
    """A live benchmark's tasks from --data, ``live.sources`` or its packaged/default location."""
    from e3orch.data.live import load_benchmark

    src = source or params.live.sources.get(benchmark) or None
    return load_benchmark(benchmark, src, eval_fraction=params.live.eval_fraction)
