"""Routing probe: does a freshly warm-started default policy learn to read the executor cards?

The warm start of ``params.yaml`` (same model shape, tokenizer, prompts, SFT settings and
randomised pools) is run with one teacher only, the heuristic, so that its routing is a single
consistent rule the policy could copy, and without correction rounds (``warmstart.dagger_rounds``
0): the probe measures what cloning alone learns. On held-out eval tasks the policy then makes the plan
decisions the heuristic made (greedy, same prompts) and the probe counts how often its first
subtask names the same executor — as a card handle (``E3``) with ``policy.prompt: full``, as a
menu rank (``#2``) with ``compact``:

* ``handle_agreement``: the policy's first executor reference = the heuristic's;
* ``majority_agreement``: what always giving the most common reference of these decisions would
  score (the best constant answer), and ``uniform_chance``: the mean of 1 / number of options
  (cards, or the first part's menu; what a random choice would score). A policy that reads
  cards is far above both;
* ``plan_exact`` / ``milestone_exact``: whole decisions equal to the heuristic's.

It is a measurement, not a test: it trains a model (minutes on CPU).
"""

from __future__ import annotations

import os
import platform
import re
import tempfile
from collections import Counter
from typing import Any

_FIRST_EXECUTOR = re.compile(r"^\s*S\d+\s*\|\s*([^|]+?)\s*\|", re.M)
_FIRST_LINE = re.compile(r"^\s*S(\d+)\s*\|[^|\n]*\|[^|\n]*(?:\|(.*))?$", re.M)


def first_executor(plan: str) -> str | None:
    m = _FIRST_EXECUTOR.search(plan)
    return m.group(1) if m else None


def first_part(plan: str, obs: Any) -> str | None:
    """The part the plan's first subtask works on: the first part its instruction names, or, for a
    slot line that leaves the instruction out (``S2 | #1 | -``), its slot's part."""
    from e3orch.orchestration.reading import PART_TAG_RE, parse_parts, plan_slots

    m = _FIRST_LINE.search(plan)
    if not m:
        return None
    instruction = (m.group(2) or "").strip()
    if instruction:
        tag = PART_TAG_RE.search(instruction)
        return tag.group(0) if tag else None
    slots = plan_slots(parse_parts(obs.question)[0], obs.pending_milestone)
    k = int(m.group(1))
    return slots[k - 1] if 1 <= k <= len(slots) else None


def options(demo: Any) -> int:
    """How many executors the first executor reference of ``demo``'s plan had to choose among: the
    cards (``policy.prompt: full``), or the distinct cards the menu of the first subtask's part names
    (compact styles; the cards where that part has no menu)."""
    from e3orch.orchestration.reading import part_menus
    from e3orch.policy.prompts import COMPACT_STYLES

    cards = len(demo.obs.cards)
    if demo.style not in COMPACT_STYLES:
        return cards
    part = first_part(demo.completion, demo.obs)
    menu = part_menus(demo.obs.question, demo.obs.cards).get(part or "", [])
    return len(set(menu)) if menu else cards


def uniform_chance(plans: list[Any]) -> float:
    """The agreement a uniformly random first executor reference would have: mean 1 / options."""
    return sum(1 / options(d) for d in plans) / max(1, len(plans))


def bench_routing(params_path: str = "params.yaml", quick: bool = False, threads: int | None = None,
                  eval_tasks: int = 60) -> dict[str, Any]:
    import torch

    from e3orch.commands.common import resolve_pool_path, sim_tasks
    from e3orch.config import load_params
    from e3orch.executors.base import load_pool_specs
    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.training.demos import collect_demonstrations
    from e3orch.training.warmstart import warmstart

    base = load_params(params_path)
    if threads:
        torch.set_num_threads(threads)
    ws = base.warmstart.model_copy(update={"teachers": {"heuristic": 1.0}, "dagger_rounds": 0, **({"tasks": min(base.warmstart.tasks, 60), "epochs": min(base.warmstart.epochs, 1.0)} if quick else {})})
    specs = load_pool_specs(resolve_pool_path(base.evaluate.executors))
    held_out = sim_tasks(base, "eval")
    held_out = held_out[:: max(1, len(held_out) // eval_tasks)][:eval_tasks]
    demos, _ = collect_demonstrations(held_out, specs, base.engine, seed=ws.seed + 1, mix={"heuristic": 1.0},
                                      style=base.policy.prompt)
    with tempfile.TemporaryDirectory() as tmp:
        params = base.model_copy(update={"warmstart": ws, "policy": base.policy.model_copy(update={"init_dir": f"{tmp}/init"})})
        out, stats, info = warmstart(params, sim_tasks(params, "train"), specs, out_dir=f"{tmp}/warmstart")
        backend = TransformersBackend(str(out), batch_size=base.policy.batch_size)
        count, budget = backend.count_tokens, base.policy.max_prompt_tokens
        plans = [d for d in demos if d.kind == "plan" and d.obs is not None]
        miles = [d for d in demos if d.kind == "milestone" and d.obs is not None]
        # the prompts warm start trained on and the policy meets at inference
        plan_prompts = [d.budgeted_prompt(count, budget) for d in plans]
        mile_prompts = [d.budgeted_prompt(count, budget) for d in miles]
        got_p = [g[0].text for g in backend.generate(plan_prompts, temperature=0.0, max_new_tokens=base.policy.max_new_tokens_plan)]
        got_m = [g[0].text for g in backend.generate(mile_prompts, temperature=0.0,
                                                     max_new_tokens=base.policy.max_new_tokens_milestone)]
        mean_prompt = sum(count(p) for p in plan_prompts) / max(1, len(plan_prompts))

    def agree(a: str | None, b: str | None) -> bool:
        return a is not None and a == b

    want = [first_executor(d.completion) for d in plans]
    majority = Counter(h for h in want if h).most_common(1)
    top = majority[0][0] if majority else None  # the best constant answer on these very decisions
    n = max(1, len(plans))
    return {
        "handle_agreement": round(sum(agree(first_executor(g), w) for g, w in zip(got_p, want)) / n, 3),
        "majority_agreement": round(sum(agree(top, w) for w in want) / n, 3),
        "majority_handle": top,
        "uniform_chance": round(uniform_chance(plans), 3),
        "plan_exact": round(sum(g.strip() == d.completion.strip() for g, d in zip(got_p, plans)) / n, 3),
        "milestone_exact": round(sum(g.strip() == d.completion.strip() for g, d in zip(got_m, miles)) / max(1, len(miles)), 3),
        "plan_decisions": len(plans),
        "milestone_decisions": len(miles),
        "mean_plan_prompt_tokens": round(mean_prompt, 1),
        "demonstrations": info["demonstrations"],
        "sft_steps": stats.steps,
        "sft_epochs": round(stats.epochs, 2),
        "sft_final_loss": round(stats.final_loss, 4),
        "sft_seconds": round(stats.seconds, 1),
        "torch_threads": torch.get_num_threads(),
        "hardware": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
    }
