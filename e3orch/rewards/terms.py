"""The three reward terms of a decision, as small pure functions with a registry.

Each term maps the facts about one decision node — the scores and costs of the leaves below
it, its own defects, whether those leaves ended with an answer — to a number. Signs: higher
performance and completeness are better; ``cost`` returns a normalised cost that the total
reward *subtracts* (see :func:`total_reward`). Tests pin the sign of every term.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeFacts:
    leaf_scores: Sequence[float]     # task scores (0..1) of the leaves below the decision
    leaf_costs: Sequence[float]      # total episode costs of those leaves
    leaf_answered: Sequence[float]   # leaf ended with an answer inside its budget (1/0; a fraction in a baseline)
    n_defects: float                 # defects of this decision itself (a group's mean in a baseline)
    cost_scale: float                # the tree's mean leaf cost (the task's cost scale), or rewards.cost_unit


def beta_lcb(scores: Sequence[float], alpha: float = 1.0, beta: float = 1.0, kappa: float = 0.5) -> float:
    """Uncertainty-aware performance: Beta posterior mean minus ``kappa`` posterior std.

    Leaf scores in [0, 1] count as fractional successes. Few leaves → wide posterior → the
    estimate is shrunk toward the prior and penalised, so a decision judged on one lucky leaf
    does not outrank one judged on many.
    """
    s, n = float(sum(scores)), len(scores)
    a, b = alpha + s, beta + n - s
    mean = a / (a + b)
    std = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    return mean - kappa * std


def normalised_cost(costs: Sequence[float], cost_scale: float, prior: float = 0.0) -> float:
    """Mean cost below the decision over ``cost_scale`` (1.0 = typical for this task when the
    scale is the task's mean leaf cost; one fixed amount with ``rewards.cost_unit``).

    Normalising per task makes a cheap task's savings weigh as much as an expensive task's.
    ``prior`` adds that many pseudo-leaves at the scale (1.0), shrinking the estimate of a
    decision judged on few leaves as :func:`beta_lcb` shrinks its performance: with ``prior`` =
    alpha + beta, one leaf's cost moves the estimate as much as one leaf's success does, and the
    trade between the two no longer depends on how many leaves a decision has below it.
    """
    if not costs or cost_scale <= 0:
        return 0.0
    return (sum(costs) / cost_scale + prior) / (len(costs) + prior)


def completeness(n_defects: float, answered: Sequence[float], penalty: float = 0.5) -> float:
    """Half for a well-formed decision (each defect costs ``penalty``), half for the fraction of
    its leaves that ended with an answer inside their budgets."""
    own = max(0.0, 1.0 - penalty * n_defects)
    done = sum(answered) / len(answered) if answered else 0.0
    return 0.5 * own + 0.5 * done


RewardTerm = Callable[[NodeFacts], float]


def make_terms(alpha: float, beta: float, kappa: float, defect_penalty: float,
               cost_prior: float = 0.0) -> dict[str, RewardTerm]:
    """The registry of reward terms with their parameters bound."""
    return {
        "performance": lambda f: beta_lcb(f.leaf_scores, alpha, beta, kappa),
        "cost": lambda f: normalised_cost(f.leaf_costs, f.cost_scale, cost_prior),
        "completeness": lambda f: completeness(f.n_defects, f.leaf_answered, defect_penalty),
    }


def total_reward(performance: float, cost: float, complete: float, w_perf: float, w_cost: float, w_complete: float) -> float:
    """The joint objective: performance and completeness add, cost subtracts."""
    return w_perf * performance - w_cost * cost + w_complete * complete
