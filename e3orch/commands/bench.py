"""``e3orch bench engine|rollout|train|routing|headroom [--json]``: figures measured in one run (not tests)."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=("engine", "rollout", "train", "routing", "headroom"))
    p.add_argument("--params", default=None, help="params file (default: ./params.yaml, all defaults when absent)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (smoke runs)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from e3orch.config import load_params_file

    if args.params is not None:
        load_params_file(args.params)  # a named file must exist and be valid before minutes of work
    args.params = args.params or "params.yaml"
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: must be at least 1")
    if args.what == "engine":
        from e3orch.benchmarks.engine import bench_engine

        result = bench_engine(quick=args.quick)
    elif args.what == "rollout":
        from e3orch.benchmarks.rollout import bench_rollout

        result = bench_rollout(params_path=args.params, quick=args.quick, threads=args.threads)
    elif args.what == "headroom":
        from e3orch.benchmarks.headroom import bench_headroom

        result = bench_headroom(params_path=args.params, quick=args.quick)
    elif args.what == "routing":
        from e3orch.benchmarks.routing import bench_routing

        result = bench_routing(params_path=args.params, quick=args.quick, threads=args.threads)
    else:
        from e3orch.benchmarks.train import bench_train

        result = bench_train(params_path=args.params, quick=args.quick, threads=args.threads)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(k) for k in result)
        for k, v in result.items():
            print(f"{k:<{width}}  {v}")
    return 0
