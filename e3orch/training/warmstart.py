"""The warm-start stage as a library function: demonstrations → SFT → ``models/warmstart``."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from e3orch.config import Params
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec
from e3orch.training.data import encode_pair
from e3orch.training.demos import collect_demonstrations
from e3orch.training.sft import SFTStats, sft_train

log = logging.getLogger(__name__)


def warmstart(
    params: Params,
    train_tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    *,
    init_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    accelerator: Any = None,
    on_step: Callable[[int, int, float], None] | None = None,
) -> tuple[Path, SFTStats, dict[str, Any]]:
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from e3orch.policy.backends.hf import load_tokenizer
    from e3orch.policy.model import create_default_policy, save_policy_dir

    cfg = params.warmstart
    if params.policy.threads:
        torch.set_num_threads(params.policy.threads)
    init = Path(init_dir or params.policy.base_model or params.policy.init_dir)
    if not params.policy.base_model and not (init / "config.json").exists():
        create_default_policy(params, init, seed=cfg.seed)
    rng = random.Random(stable_seed("warmstart", cfg.seed))
    tasks = rng.sample(list(train_tasks), min(cfg.tasks, len(train_tasks)))
    demos, episodes = collect_demonstrations(tasks, specs, params.engine, seed=cfg.seed, mix=cfg.teachers,
                                             style=params.policy.prompt)
    tokenizer = load_tokenizer(str(init))
    examples = []
    budget = params.policy.max_prompt_tokens

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    for d in demos:
        e = encode_pair(tokenizer, d.budgeted_prompt(count, budget), d.completion, cfg.max_seq_len)
        if e is None:
            continue
        # An episode has one answer decision and many milestone/plan decisions; without
        # oversampling the policy learns to keep planning and never stops.
        copies = cfg.answer_oversample if d.completion.startswith("ANSWER:") else 1
        examples.extend([e] * copies)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(str(init))
    acc = accelerator or Accelerator(cpu=not torch.cuda.is_available() or params.policy.device == "cpu")
    stats = sft_train(model, examples, accelerator=acc, lr=cfg.lr, epochs=cfg.epochs,
                      tokens_per_batch=cfg.tokens_per_batch, seed=cfg.seed, pad_id=tokenizer.pad_token_id,
                      on_step=on_step)
    out = Path(out_dir or cfg.out_dir)
    acc.wait_for_everyone()
    info = {
        "demonstrations": len(demos),
        "teacher_episodes": len(episodes),
        "teacher_accuracy": sum(e.correct for e in episodes) / max(1, len(episodes)),
        "teachers": dict(sorted(Counter(d.teacher.split(":")[0] for d in demos).items())),
        "steps": stats.steps,
        "final_loss": stats.final_loss,
        "skipped_steps": stats.skipped_steps,
        "tokens": stats.tokens,
        "seconds": stats.seconds,
    }
    state_dict = acc.get_state_dict(model)  # collective: gathers sharded (FSDP) weights on every process
    if acc.is_main_process:
        save_policy_dir(acc.unwrap_model(model), tokenizer, out, init, state_dict=state_dict, name="warmstart",
                        prompt=params.policy.prompt, warmstart=info)
    acc.wait_for_everyone()
    return out, stats, info
