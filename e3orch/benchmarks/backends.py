"""Backend benchmark (GPU): the vLLM server against the transformers backend on the same model.

Same prompts (recorded frontier prompts of a tree rollout, or rendered teacher prompts), same
number of completions and tokens per completion (EOS suppressed), measured in one run:
``transformers_tokens_per_s``, ``vllm_tokens_per_s`` and their ratio. Needs a CUDA GPU and a
running vLLM server (``make vllm-serve``); without them it says what is missing.
"""

from __future__ import annotations

import time
from typing import Any


def teacher_prompts(params: Any, n: int) -> list[str]:
    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.executors.base import load_pool_specs
    from e3orch.training.demos import collect_demonstrations

    demos, _ = collect_demonstrations(sim_tasks(params, "train")[: max(8, n // 4)],
                                      load_pool_specs(resolve_pool_path(params.evaluate.executors)), params.engine)
    return [d.prompt for d in demos][:n]


def bench_backends(model: str, vllm_url: str, params: Any, n_prompts: int = 256, gen_tokens: int = 128) -> dict[str, Any]:
    import torch

    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.policy.backends.vllm import VLLMBackend

    if not torch.cuda.is_available():
        raise RuntimeError("bench backends needs a CUDA GPU (the transformers side runs on it too)")
    prompts = teacher_prompts(params, n_prompts)
    out: dict[str, Any] = {"model": model, "prompts": len(prompts), "gen_tokens": gen_tokens,
                           "gpu": torch.cuda.get_device_name(0)}
    hf = TransformersBackend(model, device="cuda", dtype="bfloat16", batch_size=64)
    hf.generate(prompts[:4], max_new_tokens=8)
    torch.cuda.synchronize()
    t = time.perf_counter()
    hf.generate(prompts, max_new_tokens=gen_tokens, min_new_tokens=gen_tokens, temperature=1.0, seed=0)
    torch.cuda.synchronize()
    out["transformers_tokens_per_s"] = round(len(prompts) * gen_tokens / (time.perf_counter() - t), 1)
    hf.release()
    vb = VLLMBackend(model, base_url=vllm_url)
    vb.generate(prompts[:4], max_new_tokens=8)
    t = time.perf_counter()
    vb.generate(prompts, max_new_tokens=gen_tokens, min_new_tokens=gen_tokens, temperature=1.0, seed=0)
    out["vllm_tokens_per_s"] = round(len(prompts) * gen_tokens / (time.perf_counter() - t), 1)
    out["vllm_over_transformers"] = round(out["vllm_tokens_per_s"] / out["transformers_tokens_per_s"], 2)
    # weight sync: push the same weights back (what every RL round does)
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model)
    out["weight_sync_s"] = round(vb.update_weights(m), 3)
    vb.release()
    return out
