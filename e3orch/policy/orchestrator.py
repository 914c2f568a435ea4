"""The policy orchestrator: an LLM making the engine's decisions, batched across episodes.

Every ``decide`` call renders the prompt (cards, task, trimmed history) and queues it; a
micro-batcher gathers the prompts of all episodes in flight and generates them in one backend
call, in a worker thread, so executors of other episodes keep running during generation.
Whatever the model writes goes through the engine's tolerant parser: malformed decisions
become recorded defects, never crashes.

A *futile* milestone names only parts the engine would refuse (each has had its
``engine.max_part_attempts`` subtasks) or that the task does not have. A greedy policy that writes
one tends to write it again — the state barely changes when a plan is refused — and loops until
the milestone budget ends the episode without an answer. With ``policy.resample_futile: N`` such a
milestone is re-drawn up to N times at ``policy.resample_temperature`` (invalid-action masking by
rejection). With ``policy.mask_futile`` a milestone that is still futile is replaced by the valid
decision the policy itself scores highest (:func:`valid_milestones`: answer the final part, solve
one part that is not spent, or solve every ready part) — greedy decoding restricted to actions the
engine would run, by scoring those few candidates rather than sampling. Both counts are kept in
:attr:`PolicyOrchestrator.resampled` and evaluation reports them per system as
``resampled_milestones`` in ``metrics.json``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e3orch.data.sim import stable_seed
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator
from e3orch.orchestration.protocol import parse_milestone, render_answer, render_milestone
from e3orch.orchestration.reading import deps_met, futile_parts, is_spent, parse_parts, part_status
from e3orch.policy.backends.base import Generation, PolicyBackend, backend_from_params
from e3orch.policy.prompts import PromptStyle, join_answers, policy_prompt_style, render_prompt, sub_prompts


@dataclass
class DecodeSettings:
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: dict[str, int] = field(default_factory=lambda: {"milestone": 24, "plan": 160})
    max_prompt_tokens: int = 1024
    prompt_style: PromptStyle = "full"
    resample_futile: int = 0
    resample_temperature: float = 1.0
    mask_futile: bool = False

    @classmethod
    def from_policy(cls, pc: Any, *, temperature: float, prompt_style: PromptStyle,
                    resample: bool = True) -> DecodeSettings:
        """``params.policy``'s decoding knobs, at ``temperature`` and with ``prompt_style``
        (``resample=False``: futile milestones are kept, e.g. for DAgger's state collection)."""
        return cls(temperature=temperature, top_p=pc.top_p,
                   max_new_tokens={"milestone": pc.max_new_tokens_milestone, "plan": pc.max_new_tokens_plan},
                   max_prompt_tokens=pc.max_prompt_tokens, prompt_style=prompt_style,
                   resample_futile=pc.resample_futile if resample else 0,
                   resample_temperature=pc.resample_temperature, mask_futile=pc.mask_futile and resample)


def futile_milestone(obs: Observation, completion: str) -> bool:
    """Whether ``completion`` is a milestone that names parts, none of which the engine would still
    run: each is spent (``max_part_attempts`` subtasks so far) or not a part of the task. Answers,
    unparseable text and milestones without part tags are not futile (the parser records those)."""
    decision = parse_milestone(completion)
    return decision.kind == "milestone" and bool(futile_parts(decision.text, obs.question, obs.history, obs.max_part_attempts))


def valid_milestones(obs: Observation) -> list[str]:
    """The milestone decisions the engine would act on in ``obs`` (compact tasks with numbered
    parts): answer the final part, solve one part that is not spent, or solve every ready part —
    not spent, without a value yet, its dependencies all with one — when there is more than one.
    ``[]`` for a task without numbered parts."""
    parts, sink = parse_parts(obs.question)
    if not parts:
        return []
    status = part_status(obs.history, parts)
    fresh = [p for p in parts if not is_spent(status[p.id].attempts, obs.max_part_attempts)]
    ready = [p.id for p in fresh if status[p.id].value is None and deps_met(p, status)]
    out = [render_answer(sink or parts[-1].id)] + [render_milestone(f"Solve {p.id}") for p in fresh]
    if len(ready) > 1:
        out.append(render_milestone("Solve " + ", ".join(ready[: obs.max_plan_subtasks])))
    return out


class MicroBatcher:
    """Collects concurrent generate requests of one decision kind into one backend call."""

    def __init__(self, backend: PolicyBackend, settings: DecodeSettings, seed: int = 0) -> None:
        self.backend = backend
        self.settings = settings
        self.seed = seed
        self.calls = 0
        self._queues: dict[tuple[str, float], list[tuple[str, int, asyncio.Future[Generation]]]] = {}
        self._scheduled: set[tuple[str, float]] = set()
        self._busy: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None  # one backend call at a time, per loop

    async def generate(self, prompt: str, kind: str, temperature: float | None = None, row_seed: int = 0) -> Generation:
        """One completion of ``prompt``, batched with the other requests of the same kind and
        temperature (default: the settings'), sampled from the stream of ``row_seed``: which
        requests happen to share a batch depends on timing, what each one draws does not."""
        key = (kind, self.settings.temperature if temperature is None else temperature)
        fut: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append((prompt, row_seed, fut))
        if key not in self._scheduled:
            self._scheduled.add(key)
            asyncio.get_running_loop().create_task(self._flush(key))
        return await fut

    async def _flush(self, key: tuple[str, float]) -> None:
        # Let every episode that is ready reach its decide() before generating.
        for _ in range(3):
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        if self._busy is None or self._busy[0] is not loop:  # a batcher may outlive an asyncio.run
            self._busy = (loop, asyncio.Lock())
        # While the backend generates, the other episodes keep running and queue their next
        # requests; taking the queue only once the backend is free batches all of them in one
        # call (taken earlier, each would wait on the backend with a batch of a few prompts).
        async with self._busy[1]:
            batch, self._queues[key] = self._queues.get(key, []), []
            self._scheduled.discard(key)
            if not batch:
                return
            self.calls += 1
            s = self.settings
            kind, temperature = key
            try:
                out = await asyncio.to_thread(
                    self.backend.generate, [p for p, _, _ in batch], n=1, temperature=temperature, top_p=s.top_p,
                    max_new_tokens=s.max_new_tokens[kind], seed=self.seed + self.calls,
                    row_seeds=[r for _, r, _ in batch],
                )
            except Exception as exc:  # surface the failure to every waiting episode
                for _, _, f in batch:
                    f.set_exception(exc)
                return
        for (_, _, f), gens in zip(batch, out):
            f.set_result(gens[0])


class PolicyOrchestrator(Orchestrator):
    def __init__(self, backend: PolicyBackend, settings: DecodeSettings | None = None, *, name: str = "policy", seed: int = 0) -> None:
        self.backend = backend
        self.settings = settings or DecodeSettings()
        self.name = name
        self.batcher = MicroBatcher(backend, self.settings, seed)
        self.resampled = 0  # futile milestones re-drawn (policy.resample_futile)
        self._decisions: dict[str, int] = {}  # per task: decisions asked so far (their sampling streams)

    @classmethod
    def from_checkpoint(cls, path: str, *, seed: int = 0, params: Any = None, **overrides: Any) -> PolicyOrchestrator:
        from e3orch.config import load_params

        params = params or load_params()
        pc = params.policy
        backend = backend_from_params(pc, path)
        settings = DecodeSettings.from_policy(pc, temperature=overrides.get("temperature", pc.eval_temperature),
                                              prompt_style=policy_prompt_style(backend, pc.prompt))
        name = overrides.get("name") or _checkpoint_name(path)
        return cls(backend, settings, name=name, seed=seed)

    def prompt(self, obs: Observation, kind: DecisionType) -> str:
        return render_prompt(obs, kind, count_tokens=self.backend.count_tokens, max_tokens=self.settings.max_prompt_tokens,
                             style=self.settings.prompt_style)

    def _row_seed(self, task_id: str) -> int:
        """The sampling stream of a task's next draw: the orchestrator's seed, the task and how many
        draws it has had (an episode's decisions come one after another), never the batch."""
        n = self._decisions.get(task_id, 0)
        self._decisions[task_id] = n + 1
        return stable_seed(self.batcher.seed, task_id, n)

    async def answer_questions(self, obs: Observation, kind: DecisionType, questions: list[str]) -> list[str]:
        """The answers to a factored decision's questions (a plan's slots, or a per_part milestone's
        parts), asked side by side, their sampling streams drawn in order."""
        gens = await asyncio.gather(*(self.batcher.generate(q, kind, row_seed=self._row_seed(obs.task_id))
                                      for q in questions))
        return [g.text for g in gens]

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        questions = sub_prompts(obs, kind, self.settings.prompt_style)
        if questions is not None:
            return join_answers(obs, await self.answer_questions(obs, kind, questions), kind)
        prompt = self.prompt(obs, kind)
        gen = await self.batcher.generate(prompt, kind, row_seed=self._row_seed(obs.task_id))
        s = self.settings
        if kind != "milestone" or not (s.resample_futile or s.mask_futile):
            return gen.text
        futile = futile_milestone(obs, gen.text)  # once per draw
        for _ in range(s.resample_futile):
            if not futile:
                break
            self.resampled += 1
            gen = await self.batcher.generate(prompt, kind, s.resample_temperature, row_seed=self._row_seed(obs.task_id))
            futile = futile_milestone(obs, gen.text)
        if futile and s.mask_futile:
            candidates = valid_milestones(obs)
            if candidates:
                self.resampled += 1
                logps = await asyncio.to_thread(self.backend.score, [prompt] * len(candidates), candidates)
                return max(zip(candidates, logps), key=lambda c: sum(c[1]))[0]
        return gen.text

    async def aclose(self) -> None:
        self.backend.release()


def _checkpoint_name(path: str) -> str:
    meta = Path(path) / "e3orch_policy.json"
    if meta.exists():
        name = json.loads(meta.read_text()).get("name")
        if name:
            return str(name)
    return str(path)
