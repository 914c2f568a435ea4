"""Simulated executors: LLM agents and tools described by per-skill success profiles.

A simulated executor reads the sim task's hidden requirement graph (never shown to the
orchestrator). For each part its instruction names (``P3``) it:

* needs the values of the part's dependencies — from the episode's workspace (values produced
  in earlier milestones) or from the outputs of the subtask's own dependencies in the plan;
  a missing input makes that part fail ("missing input P1");
* succeeds with probability ``skill_rate ** (1 + sensitivity·difficulty)`` × ``cram_penalty ** (k-1)``
  when the subtask covers ``k`` parts at once; a success with a wrong input still yields a wrong
  value (errors propagate silently, as with real agents);
* reports ``P3 = <value> (confidence c)`` where the confidence is noisy but higher on average for
  correct values, so an orchestrator can decide to repair.

Tokens, cost and latency follow the spec's price and latency with seeded noise. Optional
injected faults (``fault_rate``, ``timeout_rate``, ``slow_rate``) exercise every failure path of
the scheduler. Latencies are virtual (reported, not slept) unless ``sleep_scale`` > 0.
Everything is a pure function of the request's seed.

What this module deliberately does not do: look at executor names or cards (only the spec's
hidden fields drive behaviour), or call anything real.
"""

from __future__ import annotations

import asyncio
import math
import random
import re

from e3orch.data.sim import make_value
from e3orch.data.tasks import Task
from e3orch.executors.base import (
    SKILLS,
    ExecutionResult,
    Executor,
    ExecutorSpec,
    SubtaskRequest,
    register_executor,
)

_PART_RE = re.compile(r"\bP(\d+)\b")
_VALUE_RE = re.compile(r"\b(P\d+) = (\S+)")
_OUT_TOKENS = {"retrieve": 80, "compute": 60, "code": 220, "reason": 160}

_OPTION_DEFAULTS: dict[str, float] = {
    "difficulty_sensitivity": 1.0,  # exponent growth per difficulty level
    "cram_penalty": 0.8,            # success multiplier per extra part in one subtask
    "verbosity": 1.0,               # output-token multiplier
    "fault_rate": 0.0,              # P(executor error)
    "timeout_rate": 0.0,            # P(call hangs until timeout)
    "slow_rate": 0.0,               # P(call is 5x slower)
    "sleep_scale": 0.0,             # >0: really sleep latency_s * sleep_scale (benchmarks)
    "timeout_s": 60.0,              # reported latency of a timed-out call
    "latency_noise": 0.2,           # sd of the log-normal latency noise (0 = fixed latencies)
}


def parse_values(text: str) -> dict[str, str]:
    """``P3 = value`` pairs in an executor output (what the workspace keeps)."""
    return {m.group(1): m.group(2) for m in _VALUE_RE.finditer(text)}


@register_executor("simulated")
class SimulatedExecutor(Executor):
    virtual_time = True

    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        opts = spec.options
        unknown = set(opts) - set(_OPTION_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for kind simulated; known: {sorted(_OPTION_DEFAULTS)}")
        if spec.skills is None:
            raise ValueError("kind simulated needs 'skills' (per-skill success rates)")
        self.rates = {s: float(spec.skills.get(s, 0.0)) for s in SKILLS}
        self.opt = {}
        for k, default in _OPTION_DEFAULTS.items():
            v = opts.get(k, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"option {k!r} must be a non-negative number, got {v!r}")
            if k.endswith("_rate") and v > 1:
                raise ValueError(f"option {k!r} must be a probability in [0, 1], got {v!r}")
            self.opt[k] = float(v)
        self.virtual_time = self.opt["sleep_scale"] <= 0

    def success_probability(self, skill: str, difficulty: int, n_parts: int) -> float:
        p = self.rates.get(skill, 0.0) ** (1.0 + self.opt["difficulty_sensitivity"] * difficulty)
        return p * self.opt["cram_penalty"] ** max(0, n_parts - 1)

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        result = self.simulate(request)
        if self.opt["sleep_scale"] > 0 and result.latency_s > 0:
            await asyncio.sleep(result.latency_s * self.opt["sleep_scale"])
        return result

    def simulate(self, request: SubtaskRequest) -> ExecutionResult:
        rng = random.Random(request.seed ^ 0x5EED)
        task: Task | None = request.task
        ctx_words = sum(len(out.split()) for _, out in request.context)
        in_tokens = 40 + int(1.3 * (len(request.instruction.split()) + ctx_words))

        lines: list[str] = []
        out_tokens = 0
        if task is None or not task.requirements:
            # Free-form use (e.g. `e3orch call` without a task): a generic reply.
            lines.append(f"[{self.name}] simulated reply to: {request.instruction[:120]}")
            out_tokens = int(40 * self.opt["verbosity"])
        else:
            available: dict[str, str] = dict(request.state or {})
            for _, out in request.context:
                available.update(parse_values(out))
            wanted = {f"P{n}" for n in _PART_RE.findall(request.instruction)}
            parts = [r for r in task.requirements if r.id in wanted]
            if not parts:
                lines.append("No part of the task is named in this instruction (refer to parts as P1, P2, ...).")
                out_tokens = 20
            for req in parts:
                missing = [d for d in req.deps if d not in available]
                if missing:
                    lines.append(f"{req.id}: cannot proceed, missing input {', '.join(missing)}")
                    out_tokens += 15
                    continue
                inputs_ok = all(available[d] == task.requirement(d).value for d in req.deps)  # type: ignore[union-attr]
                success = rng.random() < self.success_probability(req.skill, req.difficulty, len(parts))
                correct = success and inputs_ok
                value = req.value if correct else _wrong_value(req.skill, req.value, rng)
                conf = _confidence(correct, rng)
                lines.append(f"{req.id} = {value} (confidence {conf:.2f})")
                available[req.id] = value
                out_tokens += int(_OUT_TOKENS[req.skill] * (1 + 0.5 * req.difficulty) * self.opt["verbosity"])
        out_tokens = max(1, int(out_tokens * math.exp(rng.gauss(0, 0.15))))
        cost = self.spec.cost(in_tokens, out_tokens)
        lat = self.spec.latency
        latency = (lat.base_s + lat.per_1k_tokens_s * (in_tokens + out_tokens) / 1000.0) * math.exp(rng.gauss(0, self.opt["latency_noise"]))

        u = rng.random()
        if u < self.opt["fault_rate"]:
            return ExecutionResult(request.subtask_id, self.name, False, "", cost * 0.3, latency * 0.3,
                                   "executor error: simulated fault", in_tokens, 0)
        u -= self.opt["fault_rate"]
        if u < self.opt["timeout_rate"]:
            return ExecutionResult(request.subtask_id, self.name, False, "", cost, self.opt["timeout_s"],
                                   f"timeout after {self.opt['timeout_s']:g}s", in_tokens, 0)
        u -= self.opt["timeout_rate"]
        if u < self.opt["slow_rate"]:
            latency *= 5.0
        return ExecutionResult(request.subtask_id, self.name, True, "\n".join(lines), cost, latency, None, in_tokens, out_tokens)


def _wrong_value(skill: str, true: str, rng: random.Random) -> str:
    for _ in range(5):
        v = make_value(skill, rng)
        if v != true:
            return v
    return true + "x"


def _confidence(correct: bool, rng: random.Random) -> float:
    mu, sd = (0.8, 0.12) if correct else (0.5, 0.18)
    return min(0.99, max(0.01, rng.gauss(mu, sd)))
