"""Rollout benchmark: execution sharing of tree rollouts and batched vs batch-1 generation.

* ``calls_per_leaf_tree``: executor calls a tree rollout really ran, per leaf.
  ``calls_per_leaf_independent``: calls the same leaves would need as independent rollouts
  (every leaf re-running its whole path). ``sharing_ratio`` = tree / independent.
* ``tokens_per_s_batch1`` vs ``tokens_per_s_batched``: the same real frontier prompts (plan
  decisions recorded in the rollout), generated one at a time and then all in one batched call,
  each completion exactly ``gen_tokens`` long (EOS suppressed) so both sides decode the same
  number of tokens. Both go through the same ``TransformersBackend.generate``, prefill included.
  In the batched call, prompts that begin alike (a task's executor cards and history; identical
  prompts) prefill their shared leading tokens once; a prompt generated alone has nothing to
  share them with. Decoding attends to every prompt in full on both sides.
"""

from __future__ import annotations

import logging
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _policy_dir(params: Any, tmp: str) -> tuple[str, str]:
    ws = Path(params.warmstart.out_dir)
    if (ws / "config.json").exists():
        return str(ws), "warmstart"
    # No warm-started policy yet (fresh clone): make a small one so plans are real.
    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.executors.base import load_pool_specs
    from e3orch.training.warmstart import warmstart

    log.warning("no %s: warm-starting a small policy for the benchmark (run `make run` to use the pipeline's)", ws)
    quick = params.model_copy(update={"warmstart": params.warmstart.model_copy(update={"tasks": 120, "epochs": 1.5}),
                                      "policy": params.policy.model_copy(update={"init_dir": f"{tmp}/init"})})
    out, _, _ = warmstart(quick, sim_tasks(params, "train"), load_pool_specs(resolve_pool_path(params.evaluate.executors)),
                          out_dir=f"{tmp}/warmstart")
    return str(out), "bench-warmstart"


def bench_rollout(params_path: str = "params.yaml", quick: bool = False, threads: int | None = None) -> dict[str, Any]:
    import random

    import torch

    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.config import load_params
    from e3orch.executors.base import load_pool_specs
    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.rollout.tree import TreeRollout

    params = load_params(params_path)
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        policy, source = _policy_dir(params, tmp)
        backend = TransformersBackend(policy, batch_size=64)
        tasks = random.Random(0).sample(sim_tasks(params, "train"), 8 if quick else 24)
        engine = TreeRollout.from_params(backend, params)
        specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
        t = time.perf_counter()
        res = engine.run(tasks, specs, seed=params.rollout.seed)
        rollout_s = time.perf_counter() - t

        prompts = [n.prompt for n in res.nodes if n.kind == "plan"][: 16 if quick else 32]
        gen_tokens = 32 if quick else 96  # the reference setting (prompt + 96 new tokens; docs/benchmarks.md)
        backend.generate(prompts[:2], max_new_tokens=4, temperature=1.0, seed=0)  # warm-up
        t = time.perf_counter()
        for i, p in enumerate(prompts):
            backend.generate([p], max_new_tokens=gen_tokens, min_new_tokens=gen_tokens, temperature=1.0, seed=i)
        b1 = len(prompts) * gen_tokens / (time.perf_counter() - t)
        t = time.perf_counter()
        backend.generate(prompts, max_new_tokens=gen_tokens, min_new_tokens=gen_tokens, temperature=1.0, seed=0)
        bn = len(prompts) * gen_tokens / (time.perf_counter() - t)
        mean_prompt = sum(backend.count_tokens(p) for p in prompts) / max(1, len(prompts))

    share = res.sharing()
    return {
        "calls_per_leaf_tree": round(share["calls_per_leaf_tree"], 3),
        "calls_per_leaf_independent": round(share["calls_per_leaf_independent"], 3),
        "sharing_ratio": round(share["sharing_ratio"], 3),
        "tokens_per_s_batch1": round(b1, 1),
        "tokens_per_s_batched": round(bn, 1),
        "batched_over_batch1": round(bn / b1, 2),
        "batch_size": len(prompts),
        "gen_tokens": gen_tokens,
        "mean_prompt_tokens": round(mean_prompt, 1),
        "tasks": len(tasks),
        "decisions": len(res.nodes),
        "leaves": len(res.leaves),
        "executor_calls_tree": res.calls_tree,
        "executor_calls_independent": res.calls_independent,
        "rollout_s": round(rollout_s, 2),
        "rollout_generate_s": round(res.generate_s, 2),
        "rollout_execute_s": round(res.execute_s, 2),
        "policy": source,
        "torch_threads": torch.get_num_threads(),
        "hardware": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
    }
