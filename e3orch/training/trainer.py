"""The RL trainer: rounds of tree rollout → scoring → clipped policy-gradient update.

One :func:`train_rl` runs single-process on CPU, multi-process on CPU (gloo, e.g.
``torchrun --nproc_per_node 2`` or ``accelerate launch --multi_gpu --num_processes 2``) and on
one or many GPUs (DDP/FSDP through Accelerate configs in ``configs/accelerate/``). Each process
rolls out its own share of the round's tasks with the current weights, scores them, and the
update all-reduces gradients; every process does the same number of optimizer steps.

Weight sync: with the in-process ``transformers`` backend the rollout engine *is* the trainer's
model (zero-copy). With ``vllm`` the weights are pushed to the server after each update.

Checkpoints (model, optimizer, scheduler, RNG, round) are written after every round, so a killed
run resumes and loses at most the round in flight.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
import torch

from e3orch.config import Params
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec
from e3orch.files import write_text_atomic
from e3orch.policy.backends.base import prompt_ids
from e3orch.policy.workers import PolicyWorkers, worker_count
from e3orch.rewards.score import score_nodes
from e3orch.rollout.records import leaves_frame, nodes_frame, spine_nodes
from e3orch.rollout.tree import RolloutResult, rollout_shares, sharing_ratio
from e3orch.training.data import (
    Example,
    collate,
    completion_logprobs,
    make_batches,
    prefix_cache_kwarg,
    shared_prefix_logprobs,
)
from e3orch.training.optim import finite_step
from e3orch.training.rl import clipped_pg_loss, without_stop_token

log = logging.getLogger(__name__)


class _TiedHeadNotice(logging.Filter):
    """Accelerate's ``save_state`` warns every round that it left the LM head out of the
    safetensors file because it shares its storage with the embeddings. With tied embeddings
    (the small policy, many chat models) that is the intended layout: loading ties them again
    (tests/training/test_update.py checks every weight after a resume), so the notice is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("Removed shared tensor" in record.getMessage() and "lm_head.weight" in record.getMessage())


@dataclass
class RoundMetrics:
    round: int
    accuracy: float             # leaves that answered correctly
    cost: float                 # mean leaf cost
    reward: float
    performance: float
    cost_norm: float
    completeness: float
    defects_per_decision: float
    kl: float
    clip_frac: float
    ratio_mean: float
    pg_loss: float
    n_decisions: int
    n_leaves: int
    sharing_ratio: float
    generated_tokens: int
    update_tokens: int
    time_generate_s: float
    time_execute_s: float
    time_score_s: float
    time_update_s: float
    time_sync_s: float
    completion_tokens_per_s: float = 0.0
    update_tokens_per_s: float = 0.0
    skipped_steps: int = 0           # optimizer steps skipped for a non-finite gradient
    n_replayed: int = 0              # train.replay_rounds: earlier rounds' examples the update also trained on
    n_tasks: int = 0                 # task trees the round updated on (all processes)
    val_accuracy: float | None = None  # greedy, on the validation split (train.validate_rounds)
    val_cost: float | None = None
    val_pools: dict[str, dict[str, float]] | None = None  # per train.validate_pools kind: {"accuracy", "cost"}
    time_validate_s: float | None = None  # the round's validation (train.validate_rounds)
    time_checkpoint_s: float | None = None  # saving the round's checkpoint
    w_cost: float | None = None      # the cost weight this round's rewards used (train.hold_accuracy / hold_cost)
    kept: bool | None = None         # train.hold_accuracy / hold_cost: whether the round was kept or undone
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        return {k: v for k, v in d.items() if v is not None}


def _pool_figures(v: dict[str, Any], first: dict[str, Any]) -> dict[str, dict[str, float]]:
    """A validation entry's figures per pool kind (one unnamed pool when the run has no per-pool figures)."""
    return v["val_pools"] if first.get("val_pools") else {"": {"accuracy": v["val_accuracy"], "cost": v["val_cost"]}}


def holds_accuracy(entry: dict[str, Any], first: dict[str, Any], tolerance: float) -> bool:
    """Whether a validation entry is at most ``tolerance`` less accurate than ``first`` (the warm
    start's entry) on every pool kind both were validated on."""
    base, own = _pool_figures(first, first), _pool_figures(entry, first)
    return all(own[k]["accuracy"] >= base[k]["accuracy"] - tolerance - 1e-9 for k in base)


def holds_cost(entry: dict[str, Any], first: dict[str, Any], ratio: float) -> bool:
    """Whether a validation entry costs at most ``ratio`` times ``first`` (the warm start's entry)
    on every pool kind both were validated on."""
    base, own = _pool_figures(first, first), _pool_figures(entry, first)
    return all(own[k]["cost"] <= ratio * base[k]["cost"] + 1e-9 for k in base)


def select_round(validation: Sequence[dict[str, Any]], select: str, tolerance: float = 0.01) -> dict[str, Any] | None:
    """The validation entry (``{"round", "val_accuracy", "val_cost"}``, round 0 = the warm start
    first) a run writes. ``efficient``: of the entries at most ``tolerance`` less accurate than the
    warm start (it is always one of them), the highest accuracy per cost. When the entries carry
    per-pool figures (``"val_pools": {kind: {"accuracy", "cost"}}``, ``train.validate_pools``) the
    tolerance holds on every pool, and a round's score is its smallest gain in accuracy per cost
    over the warm start's on any pool: it must be more efficient everywhere to count as more
    efficient. Otherwise (``best``) the most accurate; of equally accurate ones the cheaper. Full
    ties: the earlier."""
    validation = [v for v in validation if v.get("kept", True)]  # an undone round's weights are gone (hold_accuracy, hold_cost)
    if not validation:
        return None
    if select == "efficient":
        first = validation[0]

        def ie(f: dict[str, float]) -> float:
            return f["accuracy"] / f["cost"] if f["cost"] > 0 else float("inf")

        base = _pool_figures(first, first)
        base_ie = {k: ie(f) for k, f in base.items()}

        def score(v: dict[str, Any]) -> float:
            own = _pool_figures(v, first)
            return min(ie(own[k]) / base_ie[k] if 0 < base_ie[k] < float("inf") else ie(own[k]) for k in base)

        return max((v for v in validation if holds_accuracy(v, first, tolerance)), key=score)
    return max(validation, key=lambda v: (v["val_accuracy"], -v["val_cost"]))


def _sub_answers(row: dict[str, Any]) -> list[tuple[str, list[int], list[float]]]:
    """A decision's answers as asked: (prompt, tokens, their sampled log-probs) per plan slot or
    milestone part asked one at a time, else one (the whole prompt and completion)."""
    prompts, lengths = row["sub_prompts"] or [row["prompt"]], row["sub_lengths"] or [len(row["token_ids"])]
    out, start = [], 0
    for prompt, n in zip(prompts, lengths):
        out.append((prompt, list(row["token_ids"][start:start + n]), list(row["logprobs"][start:start + n])))
        start += n
    return out


def departures(scored: pl.DataFrame) -> dict[str, list[int | None]]:
    """``train.pg_tokens: departure``: for each decision at a branch point (``n_siblings`` > 1), per
    answer asked (:func:`_sub_answers`, matched by position), the first token its policy gradient
    acts on, or None where it trains nothing. An alternative's answer that repeats the first child's
    (the same question, the same tokens) trains nothing; one that departs from it trains from the
    first token where they differ. The first child's answer trains from the first token where some
    sibling departs from it, or nothing where none does. A question asked differently, or an
    answer without a counterpart, trains from its first token."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in scored.iter_rows(named=True):
        if row["n_siblings"] > 1:
            groups.setdefault((row["tree_id"], row["parent_id"]), []).append(row)

    out: dict[str, list[int | None]] = {}
    for rows in groups.values():
        answers = [_sub_answers(r) for r in rows]
        first = next((i for i, r in enumerate(rows) if r["sibling_index"] == 0), None)
        if first is None:  # no first child to compare with: every answer trains whole
            for r, own in zip(rows, answers):
                out[r["node_id"]] = [0] * len(own)
            continue
        for i, (r, own) in enumerate(zip(rows, answers)):
            against = [a for k, a in enumerate(answers) if k != first] if i == first else [answers[first]]
            starts: list[int | None] = []
            for j, (prompt, toks, _) in enumerate(own):
                diffs = [o[j] for o in against if j < len(o)]
                if (i != first and not diffs) or any(q != prompt for q, _, _ in diffs):
                    starts.append(0)
                    continue
                departed = [len(os.path.commonprefix([toks, t])) for _, t, _ in diffs if t != toks]
                starts.append(min(departed) if departed else None)
            out[r["node_id"]] = starts
    return out


def examples_from_scored(scored: pl.DataFrame, tokenizer: Any, max_len: int, *,
                         skip_zero_advantage: bool = False, anchor: str = "all",
                         pg_tokens: str = "all") -> list[Example]:
    """Decisions → training examples (completion ids and old log-probs as sampled).

    A plan asked one slot at a time (``policy.prompt: factored`` or ``per_part``) becomes one
    example per slot, and a ``per_part`` milestone one per part asked, each with the decision's
    advantage; a forced decision (nothing asked, no tokens) trains nothing. Weights make every
    tree count equally: each example gets 1 / (examples in its tree). ``skip_zero_advantage``
    leaves out decisions whose advantage is exactly 0, and merged copies whose advantages cancel
    (a tree with none left drops out); the weights count the examples kept.

    Copies merge: the same answer to the same prompt in one tree (a slot alternative repeats
    every other slot's answer of the plan it varies; siblings often sample the same plan) is one
    example with its copies' weight and their mean advantage. That is the same gradient as the
    copies apart, but it is taken whole in one optimizer step: apart, copies whose advantages
    cancel (a greedy slot answer at +a in one sibling, -a in another) landed in different
    minibatches and moved the policy back and forth.

    ``anchor="spine"`` keeps, of the decisions with advantage 0, only those on the spine
    (:func:`spine_nodes`): every comparison still trains, and the KL term anchors the states the
    greedy policy visits, not every state of every alternative's continuation.

    ``pg_tokens="departure"`` (:func:`departures`): at a branch point an alternative's answer trains
    from the first token where it departs from the first child's, and one that repeats it gets
    advantage 0 (its KL term stays); the first child's trains where some sibling departs from it.
    """
    if skip_zero_advantage:
        scored = scored.filter(pl.col("advantage") != 0.0)
    elif anchor == "spine":
        scored = scored.filter((pl.col("advantage") != 0.0) | pl.col("node_id").is_in(list(spine_nodes(scored))))
    first_diff = departures(scored) if pg_tokens == "departure" else {}
    merged: dict[tuple[str, tuple[int, ...], tuple[int, ...]], Example] = {}
    for row in scored.iter_rows(named=True):
        if not row["token_ids"]:
            continue
        # a plan asked one slot at a time (policy.prompt: factored) trains as its slots' answers, each
        # with the decision's advantage: what was sampled, from the prompt it was sampled from
        diffs = first_diff.get(row["node_id"]) if first_diff else None
        for j, (prompt, c, lp) in enumerate(_sub_answers(row)):
            if not c or len(c) >= max_len:
                continue
            p = prompt_ids(tokenizer, prompt)
            p = p[max(0, len(p) + len(c) - max_len):]
            adv, pg_from = float(row["advantage"]), 0
            if diffs is not None:  # train.pg_tokens: departure
                first = diffs[j]
                if first is None:
                    adv = 0.0
                else:
                    pg_from = first
            key = (row["tree_id"], tuple(p), tuple(c))
            if key in merged:  # weight: the copies so far; advantage: their sum until the end
                merged[key].weight += 1.0
                merged[key].advantage += adv
            else:
                merged[key] = Example(p, c, adv, lp, 1.0, row["tree_id"], pg_from)
    out = list(merged.values())
    for e in out:
        e.advantage /= e.weight
    if skip_zero_advantage:  # copies whose advantages cancel (a slot every sibling answered alike) teach nothing either
        out = [e for e in out if abs(e.advantage) > 1e-12]
    n_in_tree: dict[str, float] = {}  # the examples a tree actually yields (forced, over-long: none), copies included
    for e in out:
        n_in_tree[e.group] = n_in_tree.get(e.group, 0.0) + e.weight
    for e in out:
        e.weight /= n_in_tree[e.group]
    return out


def _split(examples: list[Example], parts: int, rng: random.Random, by_question: bool = False) -> list[list[Example]]:
    """``parts`` minibatches of about equal size, in random order (``train.minibatch_by``): each
    decision drawn on its own, or (``by_question``) each prompt's examples in one, so the answers a
    branch point's siblings gave one question are compared within one optimizer step (as merged
    copies are) and their shared prompt can be computed once there."""
    if not by_question:
        order = examples[:]
        rng.shuffle(order)
        return [order[i::parts] for i in range(parts)]
    groups: dict[tuple[int, ...], list[Example]] = {}
    for e in examples:
        groups.setdefault(tuple(e.prompt_ids), []).append(e)
    shuffled = list(groups.values())
    rng.shuffle(shuffled)
    out: list[list[Example]] = [[] for _ in range(parts)]
    for group in shuffled:  # each to the smallest minibatch so far (the first of equals)
        min(out, key=len).extend(group)
    return out


class RLTrainer:
    def __init__(self, params: Params, init_dir: str | Path, *, accelerator: Any = None) -> None:
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM

        from e3orch.policy.backends.base import on_cpu
        from e3orch.policy.backends.hf import load_tokenizer

        self.params = params
        self.cfg = params.train
        self.init_dir = Path(init_dir)
        if not (self.init_dir / "config.json").exists():
            raise FileNotFoundError(f"{self.init_dir}: no warm-start policy (run `e3orch warmstart` first)")
        self.acc = accelerator or Accelerator(cpu=on_cpu(params.policy.device))
        if params.policy.threads:
            torch.set_num_threads(params.policy.threads)
        torch.manual_seed(self.cfg.seed)
        self.tokenizer = load_tokenizer(str(self.init_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.init_dir))
        self.ref = None
        if self.cfg.kl_coef > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(str(self.init_dir)).to(self.acc.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=self.cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        self.model, self.opt, self.sched = self.acc.prepare(model, opt, sched)
        # train.minibatch_by question, one process: decisions that share a prompt compute it once
        # (training/data.py); several (DDP, FSDP): one forward per micro-batch, as the wrappers'
        # gradient hooks expect. With decision a step's decisions rarely share a prompt.
        by_question = self.cfg.minibatch_by == "question"
        self._prefix_kw = prefix_cache_kwarg(model) if by_question and self.acc.num_processes == 1 else None
        self._ref_prefix_kw = prefix_cache_kwarg(self.ref) if by_question and self.ref is not None else None
        self.backend = self._make_backend()
        n = worker_count(params.policy, training_processes=self.acc.num_processes)
        # policy.workers: rollouts and validation shared out by task between processes (policy/workers.py)
        self.workers = PolicyWorkers(params.policy, self.init_dir, n) if n > 1 else None
        self.round = 0
        self.validation: list[dict[str, Any]] = []  # {"round", "val_accuracy", "val_cost"}; round 0 = the warm start
        self.w_cost = params.rewards.w_cost  # moves with train.hold_accuracy / hold_cost
        self.kept_weights: dict[str, torch.Tensor] | None = None  # train.hold_accuracy / hold_cost: the last kept round's
        self.replay: list[pl.DataFrame] = []  # train.replay_rounds: this process's scored decisions of the last rounds

    # -- rollout engine ----------------------------------------------------------------------
    def _make_backend(self) -> Any:
        pc = self.params.policy
        if pc.backend == "vllm":
            from e3orch.policy.backends.vllm import VLLMBackend

            serve = Path(pc.vllm_model_dir)
            if serve.resolve() == self.init_dir.resolve():
                raise ValueError(f"policy.vllm_model_dir: {serve} is the warm start itself; every round's weights are "
                                 "written there: serve a copy (make vllm-serve VLLM_MODEL=<warm start> copies it)")
            return VLLMBackend(str(self.init_dir), base_url=pc.vllm_url, tokenizer=self.tokenizer, sync_dir=str(serve))
        from e3orch.policy.backends.hf import TransformersBackend

        # zero-copy: the rollout engine generates with the very module being trained
        return TransformersBackend(self.acc.unwrap_model(self.model), tokenizer=self.tokenizer,
                                   batch_size=pc.batch_size, chat_template=False, generation_threads=pc.generation_threads)

    def worker_weights(self) -> dict[str, torch.Tensor] | None:
        """The weights :attr:`workers` generate with: the model being trained, as it is now."""
        if self.workers is None:
            return None
        return {k: v.detach().cpu() for k, v in self.acc.unwrap_model(self.model).state_dict().items()}

    def close(self) -> None:
        """Stop the worker processes (``policy.workers``)."""
        if self.workers is not None:
            self.workers.close()
            self.workers = None

    def sync_weights(self) -> float:
        if self.params.policy.backend == "vllm":
            return float(self.backend.update_weights(self.acc.unwrap_model(self.model)))
        return 0.0

    # -- checkpoints -------------------------------------------------------------------------
    @property
    def ckpt(self) -> Path:
        return Path(self.cfg.checkpoint_dir)

    def fingerprint(self) -> str:
        """What a checkpoint must match to be resumed: the warm start and every knob of the run."""
        import hashlib

        h = hashlib.sha256()
        for name in ("config.json", "e3orch_policy.json"):
            f = self.init_dir / name
            h.update(f.read_bytes() if f.exists() else b"")
        weights = self.init_dir / "model.safetensors"
        if weights.exists():
            st = weights.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        knobs = {k: getattr(self.params, k).model_dump() for k in ("engine", "policy", "rollout", "rewards", "train")}
        knobs["train"].pop("rounds")  # asking for more rounds continues the same run
        knobs["train"].pop("save_rounds")  # what else a run writes does not change the run
        knobs["policy"].pop("workers")  # nor how many processes share its episodes (a task's are the same in any)
        h.update(json.dumps(knobs, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    def resume(self) -> int:
        meta = self.ckpt / "round.json"
        if meta.exists():
            info = json.loads(meta.read_text())
            if info.get("fingerprint") == self.fingerprint():
                state = self.ckpt / info.get("state", "state")
                self.acc.load_state(str(state))
                replay = sorted(state.glob(f"replay-{self.acc.process_index}-*.parquet"),
                                key=lambda f: int(f.stem.rsplit("-", 1)[1]))
                self.replay = [pl.read_parquet(f) for f in replay]
                self.round = int(info["next_round"])
                self.validation = info.get("validation", [])
                self.w_cost = float(info.get("w_cost", self.w_cost))
                log.warning("resumed from %s at round %d", self.ckpt, self.round)
            else:
                log.warning("ignoring %s: it belongs to another warm start or other params", self.ckpt)
        return self.round

    def save_checkpoint(self) -> None:
        """Save model, optimizer, scheduler and RNG state for the next round to a folder of its own
        (``state-<next round>``), then name it in ``round.json`` (written atomically), then remove
        the folders ``round.json`` no longer names. A run killed at any point resumes from a
        complete state: the new one once ``round.json`` names it, the previous one before."""
        self.acc.wait_for_everyone()
        state = f"state-{self.round}"
        notices = logging.getLogger("accelerate.utils.other")
        quiet = _TiedHeadNotice()
        if getattr(self.acc.unwrap_model(self.model).config, "tie_word_embeddings", False):
            notices.addFilter(quiet)
        try:
            self.acc.save_state(str(self.ckpt / state))
        finally:
            notices.removeFilter(quiet)
        for i, past in enumerate(self.replay):  # train.replay_rounds: what the next rounds update on again
            past.write_parquet(self.ckpt / state / f"replay-{self.acc.process_index}-{i}.parquet")
        # Every process's parameter checksum: DDP replicas must stay identical.
        sums = self.acc.gather(torch.tensor([self.param_checksum()], dtype=torch.float64, device=self.acc.device))
        if self.acc.is_main_process:
            write_text_atomic(self.ckpt / "sync.json", json.dumps({
                "round": self.round, "num_processes": self.acc.num_processes,
                "param_checksums": [float(x) for x in sums.cpu().tolist()],
            }, indent=2) + "\n")
            # atomic: never a half-written round marker
            write_text_atomic(self.ckpt / "round.json", json.dumps({
                "next_round": self.round, "init_dir": str(self.init_dir), "fingerprint": self.fingerprint(),
                "best": self.best, "validation": self.validation, "w_cost": self.w_cost, "state": state}))
            keep = {state, self.best_dir(self.best["round"]).name if self.best else ""}
            for d in [*self.ckpt.glob("best-*"), *self.ckpt.glob("state-*"), self.ckpt / "state"]:
                if d.is_dir() and d.name not in keep:  # folders round.json no longer names
                    shutil.rmtree(d, ignore_errors=True)
        self.acc.wait_for_everyone()  # no process starts the next round while the old state is removed

    # -- validation and round selection -------------------------------------------------------
    def validate(self, tasks: Sequence[Task], specs: Sequence[ExecutorSpec]) -> dict[str, Any]:
        """The current weights on the validation tasks (:func:`validate_policy`)."""
        return validate_policy(self.backend, self.params, tasks, specs, self.acc, workers=self.workers,
                               weights=self.worker_weights())

    def consider(self, figures: dict[str, Any]) -> bool:
        """Record the current weights' validation figures (:meth:`validate`); unless
        ``train.select: last``, save them to ``<checkpoint_dir>/best-<round>`` when they are the best
        so far (:func:`select_round`; the warm start is round 0). Returns whether they are. The
        previous best's folder goes only once ``round.json`` names the new one
        (:meth:`save_checkpoint`): a run killed in between still finds the best it has on record."""
        entry = {"round": self.round, **figures}
        self.validation.append(entry)
        better = self.best is entry
        if better and self.cfg.select != "last":
            self.save_policy(self.best_dir(self.round), val_accuracy=entry["val_accuracy"], val_cost=entry["val_cost"])
        return better

    def best_dir(self, round_id: int) -> Path:
        return self.ckpt / f"best-{round_id}"

    @property
    def best(self) -> dict[str, Any] | None:
        """The best validation entry so far (:func:`select_round`)."""
        return select_round(self.validation, self.cfg.select, self.cfg.select_tolerance)

    # -- accuracy and cost as constraints (train.hold_accuracy, train.hold_cost) ----------------
    def remember_weights(self) -> None:
        """Keep a copy of the current weights: what an undone round goes back to."""
        model = self.acc.unwrap_model(self.model)
        self.kept_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def hold(self, entry: dict[str, Any]) -> bool:
        """After a round's validation (``entry``, :meth:`validate`'s figures): keep the round when it is at most
        ``train.hold_accuracy`` less accurate than the warm start on every validation pool and grow
        the cost weight by ``w_cost_up``; otherwise put the last kept weights back, reset the
        optimizer's moments (they point where the undone step went), leave the round's decisions out
        of ``train.replay_rounds`` and shrink the cost weight by ``w_cost_down``. A Lagrangian cost
        weight with a validation gate: cost falls only as far as accuracy allows. With ``train.hold_cost`` a round that costs more than that many times the
        warm start on some validation pool is undone too, and the cost weight grows by ``w_cost_up``
        (accuracy rises only as far as the cost ceiling allows); a kept round then keeps the cost
        weight. Every process takes the same decision (the figures are gathered)."""
        assert self.cfg.holds and self.validation
        first = self.validation[0]
        over_cost = self.cfg.hold_cost is not None and not holds_cost(entry, first, self.cfg.hold_cost)
        below = self.cfg.hold_accuracy is not None and not holds_accuracy(entry, first, self.cfg.hold_accuracy)
        kept = not (over_cost or below)
        if kept:
            self.remember_weights()
            if self.cfg.hold_cost is None:
                self.w_cost *= self.cfg.w_cost_up
        else:
            if self.replay:  # train.replay_rounds: the undone round's decisions are not trained on again
                self.replay.pop()
            if self.kept_weights is not None:
                self.acc.unwrap_model(self.model).load_state_dict(self.kept_weights)
                getattr(self.opt, "optimizer", self.opt).state.clear()
                self.sync_weights()
            self.w_cost *= self.cfg.w_cost_up if over_cost else self.cfg.w_cost_down
        return kept

    # -- one round ---------------------------------------------------------------------------
    def rollout(self, tasks: Sequence[Task], specs: Sequence[ExecutorSpec]) -> RolloutResult:
        return rollout_shares(self.backend, self.params, tasks, specs, round_id=self.round,
                              seed=self.params.rollout.seed + self.acc.process_index, workers=self.workers,
                              weights=self.worker_weights())

    @property
    def recomputes_old_logprobs(self) -> bool:
        """``train.old_logprobs``: whether the update starts its ratios from the trainer's own log-probs."""
        mode = self.cfg.old_logprobs
        return mode == "recompute" or (mode == "auto" and self.params.policy.backend == "vllm")

    def _logprobs(self, model: Any, prefix_kw: str | None, examples: list[Example], *, align: bool) -> list[list[float]]:
        """Each example's completion log-probs under ``model`` (no gradient), batched by length
        (by prompt where ``prefix_kw`` shares prompts). ``align``: every process runs as many
        forward passes (the trained model under FSDP gathers its shards in each); the frozen
        reference is not wrapped and needs no alignment."""
        pad = self.tokenizer.pad_token_id
        copies = [replace(e) for e in examples]  # distinct objects even where ``examples`` repeats one
        index = {id(c): i for i, c in enumerate(copies)}
        chunks = make_batches(copies, self.cfg.tokens_per_microbatch, random.Random(0), group_prompts=prefix_kw is not None)
        n = len(chunks)
        if align and self.acc.num_processes > 1:
            n = int(self.acc.reduce(torch.tensor([n], device=self.acc.device), reduction="max")[0])
        chunks += [[Example([pad], [pad], 0.0, [0.0], 0.0)] for _ in range(n - len(chunks))]
        out: list[list[float]] = [[] for _ in examples]
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for chunk in chunks:
                lp = self._completion_logprobs(model, prefix_kw, chunk)
                for row, e in zip(lp.float().cpu(), chunk):
                    if id(e) in index:
                        out[index[id(e)]] = row[row.shape[0] - len(e.completion_ids):].tolist()
        model.train(was_training)
        return out

    def _completion_logprobs(self, model: Any, prefix_kw: str | None, chunk: list[Example],
                             batch: dict[str, torch.Tensor] | None = None, with_entropy: bool = False) -> Any:
        """:func:`completion_logprobs` of ``chunk`` (collated: ``batch``), each distinct prompt
        computed once where ``prefix_kw`` (the model's cache keyword) allows it."""
        if prefix_kw is not None:
            return shared_prefix_logprobs(model, chunk, self.tokenizer.pad_token_id, self.acc.device, prefix_kw,
                                          with_entropy=with_entropy)
        if batch is None:
            batch = {k: v.to(self.acc.device) for k, v in collate(chunk, self.tokenizer.pad_token_id).items()}
        return completion_logprobs(model, batch, with_entropy=with_entropy)

    def recompute_old_logprobs(self, examples: list[Example]) -> None:
        """Replace each example's recorded log-probs by the current weights' (no gradient), so
        every ratio starts at exactly 1 whatever engine generated the completions. Every process
        runs as many forward passes (FSDP gathers its shards in each)."""
        for e, lp in zip(examples, self._logprobs(self.model, self._prefix_kw, examples, align=True)):
            e.old_logprobs = lp

    def update(self, examples: list[Example]) -> dict[str, float]:
        """``ppo_epochs`` passes; each pass = ``minibatches`` optimizer steps (same count on every
        process). A step's examples are cut into micro-batches of at most
        ``train.tokens_per_microbatch`` padded tokens whose gradients accumulate, so memory stays
        bounded however many decisions a round produced. The frozen reference's log-probs (the KL
        term) are computed once, before the first pass, not once a pass; ``examples`` are left as
        they are."""
        cfg = self.cfg
        if self.ref is not None:
            examples = [replace(e, ref_logprobs=lp) for e, lp in zip(examples, self._logprobs(self.ref, self._ref_prefix_kw, examples, align=False))]
        rng = random.Random(self.cfg.seed * 1000 + self.round)
        stats = {"kl": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0, "pg_loss": 0.0, "tokens": 0.0, "micro": 0.0,
                 "skipped_steps": 0.0}
        pad = self.tokenizer.pad_token_id
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            for mb in _split(examples, cfg.minibatches, rng, by_question=cfg.minibatch_by == "question"):
                if not mb:  # keep collective calls aligned across processes: a zero-weight dummy step
                    mb = [Example([pad], [pad], 0.0, [0.0], 0.0)]
                # weights of one optimizer step sum to 1 over every process (DDP averages the gradients,
                # so each process scales by num_processes / the total of all): a tree weighs the same
                # whichever process holds it. Copies, so that the next epoch's steps start from the
                # decisions' own weights again.
                total_w = sum(e.weight for e in mb)
                if self.acc.num_processes > 1:
                    total_w = float(self.acc.reduce(torch.tensor([total_w], device=self.acc.device), reduction="sum")[0])
                    total_w /= self.acc.num_processes
                mb = [replace(e, weight=e.weight / (total_w or 1.0)) for e in mb]
                micro = make_batches(mb, cfg.tokens_per_microbatch, rng, group_prompts=self._prefix_kw is not None)
                for i, chunk in enumerate(micro):
                    batch = {k: v.to(self.acc.device) for k, v in collate(chunk, pad).items()}
                    last = i == len(micro) - 1
                    ctx = contextlib.nullcontext() if last else self.acc.no_sync(self.model)
                    with ctx:
                        entropy = None
                        if cfg.entropy_coef > 0:
                            new_lp, entropy = self._completion_logprobs(self.model, self._prefix_kw, chunk, batch,
                                                                        with_entropy=True)
                        else:
                            new_lp = self._completion_logprobs(self.model, self._prefix_kw, chunk, batch)
                        ref_lp = batch["ref_logprobs"] if self.ref is not None else None
                        parts = clipped_pg_loss(
                            new_lp, batch["old_logprobs"], ref_lp, batch["advantage"], batch["completion_mask"],
                            batch["weight"], clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
                            kl_coef=cfg.kl_coef,
                            entropy=entropy, entropy_coef=cfg.entropy_coef,
                            pg_mask=batch["pg_mask"] if cfg.pg_stop_token else without_stop_token(
                                batch["input_ids"], batch["pg_mask"], self.tokenizer.eos_token_id),
                        )
                        self.acc.backward(parts.loss)
                    stats["kl"] += parts.kl
                    stats["clip_frac"] += parts.clip_frac
                    stats["ratio_mean"] += parts.ratio_mean
                    stats["pg_loss"] += parts.pg
                    stats["tokens"] += float(batch["attention_mask"].sum())
                    stats["micro"] += 1
                if not finite_step(self.acc, self.model, self.opt, self.sched, cfg.max_grad_norm):
                    stats["skipped_steps"] += 1
        self.model.eval()
        n = max(1.0, stats["micro"])
        return {k: (v / n if k not in ("tokens", "micro", "skipped_steps") else v) for k, v in stats.items()}

    def run_round(self, train_tasks: Sequence[Task], specs: Sequence[ExecutorSpec]) -> RoundMetrics:
        rcfg = self.params.rollout
        rng = random.Random(rcfg.seed * 7919 + self.round)
        tasks = rng.sample(list(train_tasks), min(rcfg.tasks_per_round, len(train_tasks)))
        mine = tasks[self.acc.process_index :: self.acc.num_processes]

        res = self.rollout(mine, specs)
        t = time.perf_counter()
        leaves = leaves_frame(res.leaves)
        rewards = self.params.rewards.model_copy(update={"w_cost": self.w_cost})
        scored = score_nodes(nodes_frame(res.nodes), leaves, rewards,
                             self.params.rollout.lookahead, self.params.rollout.lookahead_from)
        t_score = time.perf_counter() - t
        return self._update_round(scored, leaves, rollout=res, t_score=t_score)

    def update_from_scored(self, path: str | Path, leaves_path: str | Path | None = None) -> RoundMetrics:
        """Round 1 from a scored rollout file written by the score stage (same warm-start weights)."""
        from e3orch.rollout.records import LEAF_SCHEMA, SCORED_SCHEMA, read_validated

        scored = read_validated(path, SCORED_SCHEMA)
        trees = sorted(set(scored["tree_id"].to_list()))
        mine = list(trees[self.acc.process_index :: self.acc.num_processes])
        scored = scored.filter(pl.col("tree_id").is_in(mine))
        leaves = read_validated(leaves_path, LEAF_SCHEMA).filter(pl.col("tree_id").is_in(mine)) if leaves_path else None
        m = self._update_round(scored, leaves)
        m.extra["source"] = str(path)
        return m

    def _update_round(self, scored: pl.DataFrame, leaves: pl.DataFrame | None, *,
                      rollout: RolloutResult | None = None, t_score: float = 0.0) -> RoundMetrics:
        """Update on a round's scored decisions, push the weights, and measure the round."""
        t = time.perf_counter()

        def to_examples(frame: pl.DataFrame) -> list[Example]:
            return examples_from_scored(frame, self.tokenizer, self.cfg.max_seq_len, pg_tokens=self.cfg.pg_tokens,
                                        skip_zero_advantage=self.cfg.skip_zero_advantage, anchor=self.cfg.anchor)

        examples = to_examples(scored)
        replayed = [e for past in self.replay for e in to_examples(past)]
        if self.recomputes_old_logprobs:
            self.recompute_old_logprobs(examples + replayed)
        elif replayed:  # earlier rounds' completions: their recorded log-probs are an older policy's
            self.recompute_old_logprobs(replayed)
        up = self.update(examples + replayed)
        if self.cfg.replay_rounds:
            self.replay = [*self.replay, scored][-self.cfg.replay_rounds:]
        t_update = time.perf_counter() - t
        t_sync = self.sync_weights()
        self.round += 1
        gen_s, exec_s = (rollout.generate_s, rollout.execute_s) if rollout else (0.0, 0.0)
        if leaves is not None and "probe" in leaves.columns:  # the policy's own episodes, not the rule's probes
            leaves = leaves.filter(~pl.col("probe"))
        has_leaves = leaves is not None and len(leaves) > 0
        # sums over this process's share of the round; pooled over every process below
        f = self._pooled_figures({
            "n_leaves": len(leaves) if leaves is not None else 0,
            "correct": float(leaves["correct"].sum()) if has_leaves else 0.0,  # type: ignore[index]
            "cost": float(leaves["cost"].sum()) if has_leaves else 0.0,  # type: ignore[index]
            "n_decisions": len(scored),
            "n_tasks": scored["tree_id"].n_unique(),
            **{c: float(scored[c].sum() or 0.0) for c in ("reward", "performance", "cost_norm", "completeness")},
            "defects": float(scored["defects"].list.len().sum() or 0.0),
            "generated_tokens": int(scored["token_ids"].list.len().sum() or 0),
            "update_tokens": up["tokens"],
            "n_replayed": len(replayed),
            **{k: up[k] for k in ("kl", "clip_frac", "ratio_mean", "pg_loss", "skipped_steps")},
            "time_generate_s": gen_s, "time_execute_s": exec_s, "time_score_s": t_score,
            "time_update_s": t_update, "time_sync_s": t_sync,
            "calls_tree": rollout.calls_tree if rollout else 0, "calls_independent": rollout.calls_independent if rollout else 0,
        })
        n_leaves, n_dec = int(f["n_leaves"]), max(1, int(f["n_decisions"]))
        total_time = sum(v for k, v in f.items() if k.startswith("time_"))
        return RoundMetrics(
            round=self.round,
            accuracy=f["correct"] / n_leaves if n_leaves else 0.0,
            cost=f["cost"] / n_leaves if n_leaves else 0.0,
            reward=f["reward"] / n_dec,
            performance=f["performance"] / n_dec,
            cost_norm=f["cost_norm"] / n_dec,
            completeness=f["completeness"] / n_dec,
            defects_per_decision=f["defects"] / n_dec,
            kl=f["kl"], clip_frac=f["clip_frac"], ratio_mean=f["ratio_mean"], pg_loss=f["pg_loss"],
            n_decisions=int(f["n_decisions"]), n_leaves=n_leaves, n_tasks=int(f["n_tasks"]),
            sharing_ratio=sharing_ratio(f["calls_tree"], f["calls_independent"]) if rollout else 0.0,
            generated_tokens=int(f["generated_tokens"]), update_tokens=int(f["update_tokens"]),
            time_generate_s=f["time_generate_s"], time_execute_s=f["time_execute_s"], time_score_s=f["time_score_s"],
            time_update_s=f["time_update_s"], time_sync_s=f["time_sync_s"],
            # only a round that generated its own completions has an end-to-end generation rate
            completion_tokens_per_s=f["generated_tokens"] / total_time if rollout and total_time > 0 else 0.0,
            update_tokens_per_s=f["update_tokens"] / f["time_update_s"] if f["time_update_s"] > 0 else 0.0,
            skipped_steps=int(f["skipped_steps"]), n_replayed=int(f["n_replayed"]),
        )

    def _pooled_figures(self, local: dict[str, float]) -> dict[str, float]:
        """A round's figures over every process: counts and sums add up, phase times are the
        slowest process's (the round waits for it), and the update's statistics (KL, clip
        fraction, ...; the same optimizer steps on every process) are averaged. One process: ``local``."""
        if self.acc.num_processes == 1:
            return local
        from accelerate.utils import gather_object

        parts = gather_object([local])
        out = {k: sum(p[k] for p in parts) for k in local}
        for k in local:
            if k.startswith("time_") or k == "skipped_steps":
                out[k] = max(p[k] for p in parts)
            elif k in ("kl", "clip_frac", "ratio_mean", "pg_loss"):
                out[k] = out[k] / len(parts)
        return out

    def save_policy(self, out_dir: str | Path, name: str = "e3orch", rounds: int | None = None, **meta: Any) -> Path:
        """The current weights as a policy directory; ``rounds``: the round they are from (default: the current one)."""
        out = Path(out_dir)
        self.acc.wait_for_everyone()
        state_dict = self.acc.get_state_dict(self.model)  # collective: gathers sharded (FSDP) weights
        if self.acc.is_main_process:
            from e3orch.policy.model import save_policy_dir

            save_policy_dir(self.acc.unwrap_model(self.model), self.tokenizer, out, self.init_dir, state_dict=state_dict,
                            name=name, rounds=self.round if rounds is None else rounds, init=str(self.init_dir), **meta)
        self.acc.wait_for_everyone()
        return out

    def param_checksum(self) -> float:
        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.acc.unwrap_model(self.model).parameters()))


def validate_policy(backend: Any, params: Params, tasks: Sequence[Task], specs: Sequence[ExecutorSpec],
                    acc: Any, *, workers: PolicyWorkers | None = None,
                    weights: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """``backend``'s weights, decoding as in evaluation, on the validation tasks, once per pool
    kind of ``train.validate_pools``: ``training`` gives every task the training pool as it
    is (the pool the default evaluation uses), ``randomized`` each task its own random pool,
    drawn as rollouts draw them with ``rollout.randomize_pool`` (new names, members, prices; a
    share ``rollout.generated_pool_share`` freshly generated). Each
    task always gets the same pool and the same execution seed, so rounds are compared on
    equal terms. Each process of ``acc`` runs its share, split again across ``workers`` (their
    policies given ``weights`` first). Returns ``{"val_accuracy", "val_cost"}`` over all episodes
    and ``"val_pools": {kind: {"accuracy", "cost"}}``."""
    from accelerate.utils import gather_object

    mine = list(tasks[acc.process_index :: acc.num_processes])
    if workers is None:
        runs = _validation_share(backend, mine, 0, params, specs)
    else:
        runs = [row for share in workers.map_shares(_validation_share, backend, mine, params, specs, weights=weights)
                for row in share]
    if acc.num_processes > 1:
        runs = gather_object(runs)
    kinds = params.train.validate_pools

    def figures(rows: list[tuple[str, bool, float]]) -> dict[str, float]:
        n = max(1, len(rows))
        return {"accuracy": sum(c for _, c, _ in rows) / n, "cost": sum(cost for *_, cost in rows) / n}

    pooled = figures(runs)
    return {"val_accuracy": pooled["accuracy"], "val_cost": pooled["cost"],
            "val_pools": {k: figures([r for r in runs if r[0] == k]) for k in kinds}}


def _validation_share(backend: Any, tasks: list[Task], index: int, params: Params,
                      specs: Sequence[ExecutorSpec]) -> list[tuple[str, bool, float]]:
    """:func:`validate_policy`'s episodes of ``tasks`` on this process (``index``: its share; every
    task's pools and seeds are its own): ``(pool kind, correct, cost)`` per episode."""
    import asyncio

    from e3orch.data.sim import stable_seed
    from e3orch.executors.base import build_pool
    from e3orch.orchestration.episode import run_episode
    from e3orch.policy.orchestrator import DecodeSettings, PolicyOrchestrator
    from e3orch.policy.pools import training_pool
    from e3orch.policy.prompts import policy_prompt_style

    pc, rcfg, kinds = params.policy, params.rollout, params.train.validate_pools
    settings = DecodeSettings.from_policy(pc, temperature=pc.eval_temperature, prompt_style=policy_prompt_style(backend, pc.prompt))
    # one actor per kind: a task's sampling streams (policy.resample_futile) count its own decisions
    actors: dict[str, PolicyOrchestrator] = {k: PolicyOrchestrator(backend, settings, name=f"validate-{k}") for k in kinds}

    async def one(task: Task, kind: str) -> tuple[str, bool, float]:
        rng = random.Random(stable_seed("validate", task.task_id))
        task_specs = training_pool(specs, rng, rcfg.generated_pool_share) if kind == "randomized" else list(specs)
        ep = await run_episode(task, actors[kind], build_pool(task_specs), params.engine,
                               seed=stable_seed("validate", task.task_id))
        return kind, ep.correct, ep.cost

    async def run_all() -> list[tuple[str, bool, float]]:
        return list(await asyncio.gather(*(one(t, k) for k in kinds for t in tasks)))

    return asyncio.run(run_all())


def warm_start_warning(val_accuracy: float, init_dir: str | Path) -> str | None:
    """A one-line warning when the warm start's validation accuracy is under half of what its
    teachers reached on their demonstrations (``e3orch_policy.json``; ``None`` without that
    figure): such a warm start answers before acting on most tasks or breaks its plans, and RL's
    rounds have not been seen to repair one (docs/benchmarks.md, "A broken warm start")."""
    try:
        teachers = float(json.loads((Path(init_dir) / "e3orch_policy.json").read_text())["warmstart"]["teacher_accuracy"])
    except (OSError, KeyError, TypeError, ValueError):
        return None
    if val_accuracy >= 0.5 * teachers:
        return None
    return (f"the warm start's validation accuracy {val_accuracy:.3f} is under half its teachers' {teachers:.3f}: RL has not "
            "been seen to repair such a start; warm-start again with another warmstart.seed "
            "(docs/benchmarks.md, \"A broken warm start\")")


def train_rl(
    params: Params,
    train_tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    *,
    init_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    resume: bool = True,
    on_round: Callable[[RoundMetrics], None] | None = None,
    on_validation: Callable[[dict[str, Any]], None] | None = None,
    first_scored: str | Path | None = None,
    first_leaves: str | Path | None = None,
    val_tasks: Sequence[Task] = (),
) -> tuple[Path, list[RoundMetrics]]:
    """Run ``train.rounds`` RL rounds from the warm start; write the policy to ``out_dir``.

    ``first_scored``: scored decisions of the warm-start policy (the pipeline's rollout and score
    stages); they are round 1's data instead of a fresh rollout. With ``train.validate_rounds`` the warm
    start and every round run ``val_tasks``; with ``train.select: best`` the policy written is
    the most accurate of them there (possibly the warm start itself: round 0). ``on_validation``
    gets each validation entry this call makes (``{"round", "val_accuracy", "val_cost",
    "val_pools"}``, the warm start's first); a resumed run passes the warm start's entry from its
    checkpoint instead of validating it again.
    """
    cfg = params.train
    if cfg.validate_rounds and not val_tasks:
        raise ValueError("train.validate_rounds: no validation tasks; set prepare.val_per_domain > 0 and run `e3orch prepare`")
    trainer = RLTrainer(params, init_dir or params.warmstart.out_dir)
    try:
        from accelerate import DistributedType

        if cfg.holds and trainer.acc.distributed_type == DistributedType.FSDP:
            raise ValueError("train.hold_accuracy and hold_cost keep and restore each process's whole weights, which FSDP shards; "
                             "run it with DDP (configs/accelerate/ddp_gpu.yaml) or one process, or set train.hold_cost "
                             "and train.hold_accuracy to null (params.yaml's hold_cost is 1.3; configs/params-gpu.yaml has none)")
        if resume:
            trainer.resume()

        def validate() -> dict[str, Any]:
            figures = trainer.validate(val_tasks, specs)
            if cfg.holds and trainer.validation:  # a round, not the warm start
                used = trainer.w_cost  # the weight this round's rewards had; hold() moves it
                figures = {**figures, "kept": trainer.hold(figures), "w_cost": used}
            trainer.consider(figures)
            if on_validation:
                on_validation(trainer.validation[-1])
            return figures

        if cfg.validate_rounds and not trainer.validation:  # round 0: the warm start
            validate()
            warning = warm_start_warning(trainer.validation[0]["val_accuracy"], init_dir or params.warmstart.out_dir)
            if warning and trainer.acc.is_main_process:
                log.warning(warning)
        elif on_validation and trainer.validation:  # resumed: the warm start's entry, from this run's checkpoint
            on_validation(trainer.validation[0])
        history: list[RoundMetrics] = []
        if cfg.holds:
            trainer.remember_weights()  # the warm start, or the resumed run's last kept round
        while trainer.round < cfg.rounds:
            if trainer.round == 0 and first_scored is not None:
                m = trainer.update_from_scored(first_scored, first_leaves)
            else:
                m = trainer.run_round(train_tasks, specs)
            if cfg.validate_rounds:
                t0 = time.perf_counter()
                figures = validate()
                m.time_validate_s = time.perf_counter() - t0
                m.val_accuracy, m.val_cost, m.val_pools = figures["val_accuracy"], figures["val_cost"], figures["val_pools"]
            if cfg.holds:
                m.w_cost, m.kept = trainer.validation[-1]["w_cost"], trainer.validation[-1]["kept"]
            t0 = time.perf_counter()
            if cfg.save_rounds:  # before the checkpoint (a run killed in between redoes the round and rewrites it),
                trainer.save_policy(trainer.ckpt / f"round-{trainer.round}")  # beside the folders its clean-up removes
            trainer.save_checkpoint()
            m.time_checkpoint_s = time.perf_counter() - t0
            history.append(m)
            if on_round:
                on_round(m)
        out = Path(out_dir or cfg.out_dir)
        if cfg.select != "last" and trainer.best is not None and trainer.best["round"] != trainer.round:
            if trainer.acc.is_main_process:
                best = trainer.best_dir(trainer.best["round"])
                if not best.is_dir():
                    raise FileNotFoundError(f"{best}: the best round's weights are missing (train.checkpoint_dir was "
                                            "changed by hand?); rerun with --no-resume")
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(best, out)
            trainer.acc.wait_for_everyone()
        else:
            kept = [v for v in trainer.validation if v.get("kept", True)]  # the weights now held (hold_accuracy, hold_cost)
            meta: dict[str, Any] = ({"val_accuracy": kept[-1]["val_accuracy"], "val_cost": kept[-1]["val_cost"]}
                                    if history and kept else {})
            trainer.save_policy(out, rounds=kept[-1]["round"] if kept else None, **meta)
        return out, history
    finally:
        trainer.close()  # policy.workers
