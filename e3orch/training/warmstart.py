"""The warm-start stage as a library function: demonstrations → SFT → corrections → ``models/warmstart``.

Cloning alone leaves the policy helpless in states its teachers never reach (the first thing it
does differently leads it off their paths). ``warmstart.dagger_rounds`` correction rounds fix
that: the cloned policy runs train tasks itself, the teachers label every state it reaches,
and it trains on those labels plus as many replayed demonstrations (DAgger).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from e3orch.config import Params, WarmstartConfig
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec
from e3orch.orchestration.types import Episode
from e3orch.policy.prompts import asks_about_result, echo_part
from e3orch.training.data import Example, encode_pair, merge_copies
from e3orch.training.demos import Demo, collect_corrections, collect_demonstrations
from e3orch.training.sft import SFTStats, sft_train

log = logging.getLogger(__name__)


def demo_copies(demo: Demo, cfg: WarmstartConfig) -> int:
    """How many times a demonstration enters the SFT set. An episode has one answer decision and
    many milestone/plan decisions; without oversampling the policy learns to keep planning and
    never stops (``answer_oversample``). Milestones after the first — which parts to retry, when
    to move to the final part — are the decisions the policy fits worst (``retry_oversample``).
    A ``per_part`` milestone is taught as per-part ``yes``/``no`` answers: there is no answer
    decision to oversample (the answer is every part's ``no``); its questions about a part that
    already has a result — repair it or move on — get ``result_oversample`` copies (or
    ``retry_oversample``'s, if more): they are a small share of the questions, and fitted at that
    share a warm start may repair a result at 0.62 as rarely as one at 0.80 (docs/benchmarks.md,
    "Repair questions weighed more"). Plan decisions (a factored style's slot questions) get
    ``plan_oversample`` copies: fitted at their share (9%), a warm start answered every slot alike,
    whatever its part's skill or difficulty (docs/benchmarks.md, "What a plan question is read for")."""
    if demo.kind == "plan":
        return cfg.plan_oversample
    if demo.completion.startswith("ANSWER:"):
        return cfg.answer_oversample
    if demo.kind == "milestone" and asks_about_result(demo.prompt):  # always a later milestone's question
        return max(cfg.result_oversample, cfg.retry_oversample)
    if demo.kind == "milestone" and demo.obs is not None and demo.obs.history:
        return cfg.retry_oversample
    return 1


def taught_completion(demo: Demo, cfg: WarmstartConfig) -> str:
    """What the policy is taught to answer: the demonstration's completion, a plan slot's with its
    part restated when ``slot_echo`` is on (:func:`e3orch.policy.prompts.echo_part`)."""
    return echo_part(demo.prompt, demo.completion) if cfg.slot_echo and demo.kind == "plan" else demo.completion


def encode_demos(demos: Sequence[Demo], tokenizer: Any, cfg: WarmstartConfig, max_prompt_tokens: int) -> list[Example]:
    """The SFT examples of ``demos``: each demonstration's prompt (a full prompt trimmed to
    ``max_prompt_tokens``) and taught completion, ``demo_copies`` times, each copy weighing the
    demonstration's weight (a soft label's share of its question, 1 otherwise); too long ones are left out."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    out: list[Example] = []
    encoded: dict[tuple[str, str], Example | None] = {}  # teachers repeat questions: each pair tokenised once
    for d in demos:
        pair = (d.budgeted_prompt(count, max_prompt_tokens), taught_completion(d, cfg))
        if pair not in encoded:
            encoded[pair] = encode_pair(tokenizer, *pair, cfg.max_seq_len)
        e = encoded[pair]
        if e is None:
            continue
        e = Example(e.prompt_ids, e.completion_ids, weight=d.weight)
        out.extend([e] * demo_copies(d, cfg))
    return out


def teacher_demonstrations(params: Params, train_tasks: Sequence[Task], specs: Sequence[ExecutorSpec],
                           seed: int) -> tuple[list[Demo], list[Episode]]:
    """The warm start's demonstrations for ``seed``: ``warmstart.tasks`` train tasks drawn with it,
    each run by a teacher of ``warmstart.teachers`` on its own randomised pool."""
    cfg = params.warmstart
    tasks = random.Random(stable_seed("warmstart", seed)).sample(list(train_tasks), min(cfg.tasks, len(train_tasks)))
    return collect_demonstrations(tasks, specs, params.engine, seed=seed, mix=cfg.teachers, style=params.policy.prompt,
                                  generated_share=cfg.generated_pool_share, explore_accept=cfg.explore_accept,
                                  explore_accept_free=cfg.explore_accept_free, soft_labels=cfg.soft_labels,
                                  menu_rank=params.policy.menu_rank)


def warmstart(
    params: Params,
    train_tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    *,
    init_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    accelerator: Any = None,
    on_step: Callable[[int, int, float], None] | None = None,
    val_tasks: Sequence[Task] = (),
) -> tuple[Path, SFTStats, dict[str, Any]]:
    """Clone the teachers' demonstrations into the policy, run ``warmstart.dagger_rounds``
    correction rounds and write it to ``out_dir``. With ``warmstart.select: best`` (and correction
    rounds) the weights written are the most accurate on ``val_tasks`` among those after cloning and
    after each round (:class:`BestRound`)."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from e3orch.policy.backends.base import on_cpu
    from e3orch.policy.backends.hf import load_tokenizer
    from e3orch.policy.model import check_default_policy, create_default_policy, save_policy_dir

    cfg = params.warmstart
    if params.policy.threads:
        torch.set_num_threads(params.policy.threads)
    acc = accelerator or Accelerator(cpu=on_cpu(params.policy.device))
    init = Path(init_dir or params.policy.base_model or params.policy.init_dir)
    with acc.main_process_first():  # one process builds the default policy; the others then load it
        if not params.policy.base_model and not (init / "config.json").exists():
            create_default_policy(params, init, seed=cfg.seed)
    if not params.policy.base_model:
        check_default_policy(params, init)
    demos, episodes = teacher_demonstrations(params, train_tasks, specs, cfg.seed)
    tokenizer = load_tokenizer(str(init))

    def encode(ds: Sequence[Demo]) -> list[Example]:
        return encode_demos(ds, tokenizer, cfg, params.policy.max_prompt_tokens)

    examples = merge_copies(encode(demos))
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(str(init))
    plan_stats = None
    if cfg.plan_epochs > 0:  # the plan questions alone first (see WarmstartConfig.plan_epochs)
        plan_examples = merge_copies(encode([d for d in demos if d.kind == "plan"]))
        if plan_examples:
            phase = getattr(on_step, "phase", None)  # a progress bar's phase label (e3orch.progress.StepBar)
            if phase:
                phase("warm start: plan questions alone")
            plan_stats = sft_train(model, plan_examples, accelerator=acc, lr=cfg.lr, epochs=cfg.plan_epochs,
                                   tokens_per_batch=cfg.tokens_per_batch, seed=stable_seed("plan-first", cfg.seed),
                                   pad_id=tokenizer.pad_token_id, group_prompts=cfg.batch_by_question, on_step=on_step)
            if phase:
                phase("warm start: every question")
    stats = sft_train(model, examples, accelerator=acc, lr=cfg.lr, epochs=cfg.epochs,
                      tokens_per_batch=cfg.tokens_per_batch, seed=cfg.seed, pad_id=tokenizer.pad_token_id,
                      group_prompts=cfg.batch_by_question, on_step=on_step)
    keeper = None
    if cfg.select == "best" and cfg.dagger_rounds:
        if not val_tasks:
            raise ValueError("warmstart.select: best: no validation tasks; set prepare.val_per_domain > 0 and run `e3orch prepare`")
        keeper = BestRound.on_validation(params, model, tokenizer, specs, val_tasks, acc)
        keeper(0, on_step)
    rounds = correct(params, model, tokenizer, train_tasks, specs, examples, encode,
                     accelerator=acc, on_step=on_step, after_round=keeper)
    selection: dict[str, Any] = {}
    if keeper is not None:
        selection = {"validation": keeper.entries, "kept_round": keeper.restore()}
    out = Path(out_dir or cfg.out_dir)
    acc.wait_for_everyone()
    taught: dict[str, float] = {}  # questions per kind of teacher (single:<x> as single), a soft label's answers as one
    for d in demos:
        kind = d.teacher.split(":")[0]
        taught[kind] = taught.get(kind, 0.0) + d.weight
    info = {
        "demonstrations": round(sum(taught.values())),  # questions taught
        "teacher_episodes": len(episodes),
        "teacher_accuracy": sum(e.correct for e in episodes) / max(1, len(episodes)),
        "teachers": {t: round(n) for t, n in sorted(taught.items())},
        "steps": stats.steps,
        "final_loss": stats.final_loss,
        "skipped_steps": stats.skipped_steps,
        "tokens": stats.tokens,
        "seconds": stats.seconds,
        "plan_steps": plan_stats.steps if plan_stats else 0,
        "plan_seconds": plan_stats.seconds if plan_stats else 0.0,
        "corrections": rounds,
        **selection,
    }
    state_dict = acc.get_state_dict(model)  # collective: gathers sharded (FSDP) weights on every process
    if acc.is_main_process:
        save_policy_dir(acc.unwrap_model(model), tokenizer, out, init, state_dict=state_dict, name="warmstart",
                        prompt=params.policy.prompt, warmstart=info)
    acc.wait_for_everyone()
    return out, stats, info


def correct(
    params: Params,
    model: Any,
    tokenizer: Any,
    train_tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    demo_examples: Sequence[Example],
    encode: Callable[[Sequence[Demo]], list[Example]],
    *,
    accelerator: Any,
    on_step: Callable[[int, int, float], None] | None = None,
    after_round: Callable[[int, Callable[..., None] | None], None] | None = None,
) -> list[dict[str, Any]]:
    """``warmstart.dagger_rounds`` correction rounds on ``model`` (trained in place). Each round the
    policy runs ``dagger_tasks`` train tasks (sampling at ``dagger_temperature``, pools randomised),
    the task's teacher labels every state it reached, and the policy trains on all labels so far
    plus as many demonstrations replayed (so it keeps what it cloned): as many distinct
    demonstrations as there are labels, each weighing its copies (``merge_copies``). Returns
    per-round figures: the policy's own accuracy and cost on its runs, and how often it already
    agreed.

    With several processes each runs its share of the tasks and all train on everyone's labels.
    Sharded models (FSDP) cannot generate here: the rounds need DDP or one process."""
    from accelerate.utils import DistributedType, gather_object

    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.policy.orchestrator import DecodeSettings, PolicyOrchestrator

    cfg, pc = params.warmstart, params.policy
    if cfg.dagger_rounds and accelerator.distributed_type == DistributedType.FSDP:
        raise ValueError("warmstart.dagger_rounds: correction rounds generate with the whole model and do not "
                         "run under FSDP; set it to 0 or warm-start with DDP (configs/accelerate/ddp_gpu.yaml)")
    many = accelerator.num_processes > 1
    fixes: list[Example] = []
    rounds: list[dict[str, Any]] = []
    phase = getattr(on_step, "phase", None)  # a progress bar's phase label (e3orch.progress.StepBar)
    for r in range(cfg.dagger_rounds):
        if phase:
            phase(f"correction round {r + 1}/{cfg.dagger_rounds}: the policy runs {cfg.dagger_tasks} tasks")
        rng = random.Random(stable_seed("dagger", cfg.seed, r))
        tasks = rng.sample(list(train_tasks), min(cfg.dagger_tasks, len(train_tasks)))
        backend = TransformersBackend(model, tokenizer=tokenizer, batch_size=pc.batch_size,
                                      generation_threads=pc.generation_threads)
        actor = PolicyOrchestrator(backend, DecodeSettings.from_policy(pc, temperature=cfg.dagger_temperature,
                                                                       prompt_style=pc.prompt, resample=False),
                                   name="warmstart", seed=stable_seed("dagger-decode", cfg.seed, r))
        mine = tasks[accelerator.process_index::accelerator.num_processes]
        labels, episodes, agreed = collect_corrections(mine, specs, params.engine, actor, seed=cfg.seed + r,
                                                       mix=cfg.teachers, style=pc.prompt,
                                                       generated_share=cfg.generated_pool_share,
                                                       explore_accept=cfg.explore_accept,
                                                       explore_accept_free=cfg.explore_accept_free,
                                                       soft_labels=cfg.soft_labels, menu_rank=pc.menu_rank)
        new = encode(labels)
        runs = [(e.correct, e.cost) for e in episodes]
        counts = [len(labels), agreed]
        if many:  # everyone trains on every process's labels (same examples, same order)
            new, runs = gather_object(new), gather_object(runs)
            counts = [sum(c[i] for c in gather_object([counts])) for i in range(2)]
        fixes.extend(new)
        if phase:
            phase(f"correction round {r + 1}/{cfg.dagger_rounds}: training")
        replay = rng.sample(list(demo_examples), min(len(fixes), len(demo_examples)))
        stats = sft_train(model, merge_copies(fixes + replay), accelerator=accelerator, lr=cfg.dagger_lr, epochs=cfg.dagger_epochs,
                          tokens_per_batch=cfg.tokens_per_batch, seed=stable_seed(cfg.seed, r),
                          pad_id=tokenizer.pad_token_id, group_prompts=cfg.batch_by_question, on_step=on_step)
        n = max(1, len(runs))
        rounds.append({
            "round": r + 1,
            "tasks": len(tasks),
            "policy_accuracy": sum(c for c, _ in runs) / n,
            "policy_cost": sum(cost for _, cost in runs) / n,
            "decisions": counts[0],
            "agreement": counts[1] / max(1, counts[0]),
            "steps": stats.steps,
            "final_loss": stats.final_loss,
            "skipped_steps": stats.skipped_steps,
            "seconds": stats.seconds,
        })
        log.info("correction round %d: policy accuracy %.3f cost %.3f, agreed with its teachers on %.1f%% of %d decisions",
                 r + 1, rounds[-1]["policy_accuracy"], rounds[-1]["policy_cost"], 100 * rounds[-1]["agreement"], counts[0])
        if after_round:
            after_round(r + 1, on_step)
    return rounds


class BestRound:
    """``warmstart.select: best``: called after cloning (round 0) and after each correction round,
    runs the policy greedily on the validation tasks (``train.validate_pools``, as RL's rounds are
    validated) and keeps a copy of the most accurate weights (ties: the cheaper, then the later);
    :meth:`restore` puts them back. Every process computes the same figures (they are gathered),
    so all keep the same round."""

    def __init__(self, model: Any, accelerator: Any, validate: Callable[[Any], dict[str, Any]]) -> None:
        self.model, self.acc, self.validate = model, accelerator, validate
        self.entries: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self._state: dict[str, Any] = {}

    @classmethod
    def on_validation(cls, params: Params, model: Any, tokenizer: Any, specs: Sequence[ExecutorSpec],
                      tasks: Sequence[Task], accelerator: Any) -> BestRound:
        """Judged by :func:`~e3orch.training.trainer.validate_policy` on ``tasks``."""
        from e3orch.policy.backends.hf import TransformersBackend
        from e3orch.training.trainer import validate_policy

        def validate(net: Any) -> dict[str, Any]:
            backend = TransformersBackend(net, tokenizer=tokenizer, batch_size=params.policy.batch_size,
                                          generation_threads=params.policy.generation_threads)
            return validate_policy(backend, params, tasks, specs, accelerator)

        return cls(model, accelerator, validate)

    def __call__(self, rnd: int, on_step: Callable[..., None] | None = None) -> None:
        phase = getattr(on_step, "phase", None)
        if phase:
            phase(f"validating the weights after {'cloning' if rnd == 0 else f'correction round {rnd}'}")
        net = self.acc.unwrap_model(self.model)
        entry = {"round": rnd, **self.validate(net)}
        self.entries.append(entry)
        log.info("warm start after %s: validation accuracy %.3f cost %.3f",
                 "cloning" if rnd == 0 else f"correction round {rnd}", entry["val_accuracy"], entry["val_cost"])
        if self.best is None or (entry["val_accuracy"], -entry["val_cost"]) >= (self.best["val_accuracy"], -self.best["val_cost"]):
            self.best = entry
            self._state = {k: v.detach().clone() for k, v in net.state_dict().items()}

    def restore(self) -> int:
        """Load the kept weights (when they are not the current ones); returns their round."""
        assert self.best is not None, "BestRound.restore before any validation"
        if self.best is not self.entries[-1]:
            self.acc.unwrap_model(self.model).load_state_dict(self._state)
        return int(self.best["round"])
