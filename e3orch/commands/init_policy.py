"""``e3orch init-policy``: create the small default policy (tokenizer + randomly initialised model)."""

from __future__ import annotations

import argparse
import json

from e3orch.commands.common import add_params_arg, params_from


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--out", default=None, help="output folder (default: policy.init_dir)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace a model already in the output folder")


def run(args: argparse.Namespace) -> int:
    from e3orch.evaluation.systems import is_checkpoint
    from e3orch.policy.model import create_default_policy

    params = params_from(args)
    target = args.out or params.policy.init_dir
    if is_checkpoint(target) and not args.force:
        raise ValueError(f"{target} already holds a model; pass --force to replace it (or --out another folder)")
    out = create_default_policy(params, args.out, seed=args.seed)
    meta = json.loads((out / "e3orch_policy.json").read_text())
    print(f"wrote {out}: {meta['params']:,} parameters, vocabulary {meta['vocab_size']}")
    return 0
