"""Training benchmark: one RL round end to end, and the update step against a minimal loop.

* Per-phase seconds of one real round (generate, execute, score, update, sync) and its
  ``completion_tokens_per_s`` (completion tokens generated ÷ the whole round's time).
* ``update_tokens_per_s``: the trainer's update (one optimizer step over 32 decisions: one
  minibatch, one epoch, whatever ``train.minibatches`` and ``train.ppo_epochs`` say) and
  ``reference_tokens_per_s``: the minimal clipped-PG loop below — policy forward, frozen
  reference forward, backward, AdamW — on the same model weights and the same batch, measured
  in the same run, one step of each in turn. ``update_over_reference`` is the ratio of their
  median step times (15 steps each). The batch is a round's first 32 decisions, siblings side by
  side, so some share a prompt (``batch_distinct_prompts``), which the trainer computes once and
  the minimal loop once per decision.
* ``long_completion_tokens_per_s``: the setting of TRL's GRPO benchmark — one step of 32 sampled
  completions of 256 tokens each (EOS suppressed) behind real rollout prompts, generated and
  then trained on with one update; completion tokens ÷ (generate + update) seconds.
"""

from __future__ import annotations

import copy
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import torch


def reference_step(model: Any, ref: Any, opt: Any, batch: dict[str, torch.Tensor], clip: float = 0.2, beta: float = 0.02) -> float:
    """The minimal clipped policy-gradient step (full-sequence logits, no tricks)."""
    ids, attn = batch["input_ids"], batch["attention_mask"]
    k = batch["completion_mask"].shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=batch["position_ids"], use_cache=False).logits
    lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)[:, -k:]
    with torch.no_grad():
        rlogits = ref(input_ids=ids, attention_mask=attn, position_ids=batch["position_ids"], use_cache=False).logits
        rlp = torch.log_softmax(rlogits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)[:, -k:]
    mask = batch["completion_mask"]
    ratio = torch.exp(lp - batch["old_logprobs"])
    adv = batch["advantage"].unsqueeze(1)
    pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    d = rlp - lp
    tok = pg + beta * (torch.exp(d) - d - 1)
    loss = ((tok * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def bench_train(params_path: str = "params.yaml", quick: bool = False, threads: int | None = None) -> dict[str, Any]:
    from e3orch.benchmarks.rollout import _policy_dir
    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.config import load_params
    from e3orch.executors.base import load_pool_specs
    from e3orch.rewards.score import score_nodes
    from e3orch.rollout.records import leaves_frame, nodes_frame
    from e3orch.training.data import Example, collate
    from e3orch.training.trainer import RLTrainer, examples_from_scored

    base = load_params(params_path)
    if threads:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        policy, source = _policy_dir(base, tmp)
        params = base.model_copy(update={
            "rollout": base.rollout.model_copy(update={"tasks_per_round": 4 if quick else 8}),
            "train": base.train.model_copy(update={"minibatches": 1, "ppo_epochs": 1, "checkpoint_dir": f"{tmp}/ckpt",
                                                  "kl_coef": 0.02}),
        })
        trainer = RLTrainer(params, policy)
        processes = trainer.workers.processes if trainer.workers is not None else 1
        if trainer.workers is not None:  # policy.workers: started once per training run, not timed with a round
            trainer.workers.start()
        specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
        tasks = sim_tasks(params, "train")
        round_m = trainer.run_round(tasks, specs)

        # a fixed batch of 32 decisions from a fresh rollout
        res = trainer.rollout(tasks[:8], specs)
        scored = score_nodes(nodes_frame(res.nodes), leaves_frame(res.leaves), params.rewards,
                             params.rollout.lookahead, params.rollout.lookahead_from)
        examples = examples_from_scored(scored, trainer.tokenizer, params.train.max_seq_len)
        examples = (examples * (32 // max(1, len(examples)) + 1))[:32]
        for e in examples:  # non-zero advantages so both losses do real work
            e.advantage = e.advantage or 0.5
        batch = {k: v.to(trainer.acc.device) for k, v in collate(examples, trainer.tokenizer.pad_token_id).items()}
        n_tokens = float(batch["attention_mask"].sum())
        reps = 3 if quick else 15

        # One trainer update and one reference step in turn, each timed on its own, the ratio of their
        # median times: a step takes ~0.1 s here, so a drift of the machine's speed over the run, or a
        # stall, would otherwise land on one side of the ratio.
        assert trainer.ref is not None  # kl_coef 0.02 above: the trainer holds a frozen reference
        model = copy.deepcopy(trainer.acc.unwrap_model(trainer.model)).train()
        ref = copy.deepcopy(trainer.ref).eval()
        opt = torch.optim.AdamW(model.parameters(), lr=params.train.lr)

        def reference() -> None:
            with trainer.acc.autocast():  # the trainer's precision (bf16 autocast on a GPU setting)
                reference_step(model, ref, opt, batch)

        trainer.update(examples)  # warm-ups (update leaves its examples as they are)
        reference()
        ours_s: list[float] = []
        refs_s: list[float] = []
        for _ in range(reps):
            t = time.perf_counter()
            trainer.update(examples)
            ours_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            reference()
            refs_s.append(time.perf_counter() - t)
        ours, refs = n_tokens / statistics.median(ours_s), n_tokens / statistics.median(refs_s)

        # The long-completion setting (as TRL's GRPO benchmark): one step of 32 sampled
        # completions, each exactly long_tokens long, behind real rollout prompts; end to end
        # = generate + one optimizer step on them.
        long_tokens = 64 if quick else 256
        prompts = [n.prompt for n in res.nodes][:32]
        t = time.perf_counter()
        gens = trainer.backend.generate(prompts, max_new_tokens=long_tokens, min_new_tokens=long_tokens,
                                        temperature=1.0, seed=0)
        long_gen_s = time.perf_counter() - t
        long_ex = [Example(ids, g[0].token_ids, advantage=1.0 if i % 2 else -1.0, old_logprobs=g[0].logprobs)
                   for i, (ids, g) in enumerate(zip(trainer.backend.encode_prompts(prompts), gens))]
        t = time.perf_counter()
        trainer.update(long_ex)
        long_upd_s = time.perf_counter() - t
        long_prompt = sum(len(e.prompt_ids) for e in long_ex) / max(1, len(long_ex))
        trainer.close()

    total = (round_m.time_generate_s + round_m.time_execute_s + round_m.time_score_s
             + round_m.time_update_s + round_m.time_sync_s)
    return {
        "update_tokens_per_s": round(ours, 1),
        "reference_tokens_per_s": round(refs, 1),
        "update_over_reference": round(ours / refs, 3),
        "completion_tokens_per_s": round(round_m.generated_tokens / total, 1) if total else 0.0,
        "completions_per_round": round_m.n_decisions,
        "completion_tokens_per_round": round_m.generated_tokens,
        "phase_generate_s": round(round_m.time_generate_s, 3),
        "phase_execute_s": round(round_m.time_execute_s, 3),
        "phase_score_s": round(round_m.time_score_s, 3),
        "phase_update_s": round(round_m.time_update_s, 3),
        "phase_sync_s": round(round_m.time_sync_s, 3),
        "long_completion_tokens_per_s": round(len(long_ex) * long_tokens / (long_gen_s + long_upd_s), 1),
        "long_completions": len(long_ex),
        "long_completion_tokens": long_tokens,
        "long_mean_prompt_tokens": round(long_prompt, 1),
        "long_generate_s": round(long_gen_s, 3),
        "long_update_s": round(long_upd_s, 3),
        "batch_sequences": len(examples),
        "batch_distinct_prompts": len({tuple(e.prompt_ids) for e in examples}),
        "batch_tokens": int(n_tokens),
        "policy": source,
        "torch_threads": torch.get_num_threads(),
        "rollout_processes": processes,
        "hardware": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
    }
