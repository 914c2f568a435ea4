"""A trained policy with one routing habit overridden: how much of its result that habit accounts for.

    .venv/bin/python scripts/routing_counterfactual.py models/policy      # hard coding parts: a premium #3 becomes #2
    .venv/bin/python scripts/routing_counterfactual.py models/policy --skill reason --difficulty normal,hard --tier pricey
    .venv/bin/python scripts/routing_counterfactual.py models/policy --pools default,transfer,generated

Every plan slot whose question is about a part of --skill at one of --difficulty, and whose menu
rank --rank (#3) has the price tier --tier (premium), is answered --to (#2) wherever the policy
answered --rank; every other answer is the policy's own (greedy, as in evaluation). Each pool kind
runs twice on the same tasks and execution seed (evaluate.split, evaluate.limit, evaluate.seed):
as is, which is the evaluation's own figure for that kind (reports/metrics.json; generated: the
evaluate.generated_pools pools together), and overridden. Needs a factored policy.prompt (factored,
per_part*), whose plan questions ask one slot at a time with its part's menu (docs/benchmarks.md,
"Where the generated pools' efficiency goes").
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from e3orch.orchestration.reading import MENU_REF_RE
from e3orch.policy.prompts import slot_menu_tiers, tier_answer

SLOT_RE = re.compile(r"^### S\d+ P\d+ (\w+) (\w+):", re.M)  # the slot's part: skill, difficulty


@dataclass(frozen=True)
class Override:
    skill: str
    difficulties: frozenset[str]
    rank: str
    tier: str
    to: str

    def apply(self, question: str, answer: str) -> str | None:
        """``answer`` with its rank ``#rank`` replaced by ``#to`` (and a tier written before it by
        ``#to``'s) when ``question`` is a plan slot this override covers (its skill and difficulty,
        ``#rank`` at the tier, ``#to`` on the menu) and the answer chose ``#rank``; None when the
        answer stays as it is."""
        m = SLOT_RE.search(question)
        if not m or m.group(1) != self.skill or m.group(2) not in self.difficulties:
            return None
        tiers = slot_menu_tiers(question) or {}
        if tiers.get(self.rank) != self.tier or self.to not in tiers:
            return None
        first, _, rest = answer.partition("\n")
        fields = first.split(" | ")
        for i, field in enumerate(fields):
            ref = MENU_REF_RE.match(field.strip())
            if ref and ref.group(2) == self.rank:
                fields[i] = f"#{self.to}"
                new = " | ".join(fields) + (f"\n{rest}" if rest else "")
                # a tier-first answer (per_part_tier_answers: premium #3) gets the new rank's tier
                return tier_answer(question, new) if ref.group(1) else new
        return None


def main(argv: list[str] | None = None) -> int:
    from e3orch.evaluation.evaluate import POOL_KINDS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="a policy checkpoint folder (models/policy)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--skill", default="code", help="retrieve | compute | code | reason (default code)")
    ap.add_argument("--difficulty", default="hard", help="comma-separated: easy, normal, hard (default hard)")
    ap.add_argument("--rank", default="3", help="the menu rank overridden (default 3)")
    ap.add_argument("--tier", default="premium", help="only where that rank has this price tier (default premium)")
    ap.add_argument("--to", default="2", help="the rank answered instead (default 2)")
    ap.add_argument("--pools", default="generated",
                    help=f"comma-separated pool kinds: {', '.join(POOL_KINDS)} (default generated)")
    args = ap.parse_args(argv)

    from e3orch.config import FACTORED_STYLES, load_params

    params = load_params(args.params)
    kinds = [k for k in args.pools.split(",") if k]
    bad = [k for k in kinds if k not in POOL_KINDS]
    if bad or not kinds:
        print(f"routing_counterfactual: --pools {args.pools!r}: kinds are {', '.join(POOL_KINDS)}", file=sys.stderr)
        return 2
    if params.policy.prompt not in FACTORED_STYLES:
        print(f"routing_counterfactual: policy.prompt {params.policy.prompt} asks a plan whole; "
              f"the override needs one of {', '.join(sorted(FACTORED_STYLES))}", file=sys.stderr)
        return 2
    from e3orch.executors.base import SKILLS
    from e3orch.orchestration.reading import DIFFICULTY_NAMES, MENU_NEEDS, PRICE_NAMES

    override = Override(args.skill, frozenset(d for d in args.difficulty.split(",") if d), args.rank.lstrip("#"),
                        args.tier, args.to.lstrip("#"))
    ranks = [str(n) for n in MENU_NEEDS]
    for flag, value, allowed in (("--skill", [override.skill], SKILLS),
                                 ("--difficulty", sorted(override.difficulties), DIFFICULTY_NAMES),
                                 ("--tier", [override.tier], PRICE_NAMES), ("--rank", [override.rank], ranks),
                                 ("--to", [override.to], ranks)):
        if not value or any(v not in allowed for v in value):
            print(f"routing_counterfactual: {flag} {','.join(value)!r}: one of {', '.join(allowed)}", file=sys.stderr)
            return 2
    print(f"{args.policy}: {override.skill} parts ({', '.join(sorted(override.difficulties))}) answered "
          f"#{override.rank} where it is {override.tier} -> #{override.to}")

    def make(cls: type) -> Any:
        return cls.from_checkpoint(args.policy, params=params)

    for kind in kinds:
        for name, acc, cost, ie, changed in asyncio.run(compare(params, make, kind, override)):
            print(f"  {kind:<9} {name:<10} {acc:.3f} / {cost:.3f} / IE {ie:.4f}  answers changed {changed}")
    return 0


def overridden_policy(override: Override) -> type:
    """A :class:`~e3orch.policy.orchestrator.PolicyOrchestrator` whose plan answers go through
    ``override`` (``changed`` counts the answers it replaced)."""
    from e3orch.policy.orchestrator import PolicyOrchestrator

    class Overridden(PolicyOrchestrator):
        changed = 0

        async def answer_questions(self, obs: Any, kind: Any, questions: list[str]) -> list[str]:
            answers = await super().answer_questions(obs, kind, questions)
            if kind != "plan":
                return answers
            out = []
            for q, text in zip(questions, answers):
                new = override.apply(q, text)
                self.changed += new is not None
                out.append(text if new is None else new)
            return out

    return Overridden


async def compare(params: Any, make: Callable[[type], Any], kind: str,
                  override: Override) -> list[tuple[str, float, float, float, int]]:
    """``(name, accuracy, cost, IE, answers changed)`` as is and overridden on the pools of ``kind``;
    ``make(cls)`` builds the policy as an orchestrator of class ``cls``."""
    from e3orch.commands.common import sim_tasks
    from e3orch.evaluation.evaluate import evaluation_pools, limit_per_benchmark, run_system, summarize
    from e3orch.policy.orchestrator import PolicyOrchestrator

    ecfg = params.evaluate
    tasks = limit_per_benchmark(sim_tasks(params, ecfg.split), ecfg.limit)
    pools = evaluation_pools(ecfg, [kind])[kind]
    rows = []
    try:
        for name, cls in (("as is", PolicyOrchestrator), ("overridden", overridden_policy(override))):
            orch = make(cls)
            episodes = [e for pool in pools for e in await run_system(orch, tasks, pool, params.engine, seed=ecfg.seed)]
            m = summarize(episodes)
            rows.append((name, m.accuracy, m.cost, m.ie, getattr(orch, "changed", 0)))
            await orch.aclose()
    finally:
        for pool in pools:
            await pool.aclose()
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
