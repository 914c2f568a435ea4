"""Advantage estimators: credit per decision, relative to alternatives from the same history.

``sibling`` (default): siblings are the decisions sampled from the same state (same parent node
in the same tree). A decision's advantage is its reward minus its siblings' mean reward. A
decision without siblings (the path did not branch there) is compared with the mean reward of
all decisions of the same kind in its tree — a GRPO-style group baseline; when it is the only
decision of its kind in the tree, its advantage is 0.

``matched``: like ``sibling``, but the baseline is not a mean of other decisions' rewards. It is
the reward the same terms give to the decision's *comparison group* — its siblings' leaves when
it branched, otherwise its tree's leaves — averaged into one reference leaf and counted as many
times as the decision has leaves (rewards/score.py computes it). Comparing rewards judged on
different numbers of leaves credits the leaf count, not the decision: the uncertainty-aware
performance of 8 correct leaves is 0.85 and of one correct leaf 0.55. Under ``sibling`` a tree whose
leaves all succeed pushes its early decisions up and its late ones down (by up to 3 tree standard
deviations with ``normalize_std``), and a tree whose leaves all fail does the opposite; under
``matched`` both get exactly 0 for performance, and what is left there is cost, answered budgets
and own defects.

``branch``: credit only where the path branched, and each sibling judged by its *continuation*:
the one leaf reached from it when every later branch point takes its first child. With
``rollout.trunk: greedy`` the first child is the greedy decision, so a sibling's value is "this
decision, then the greedy policy", for the greedy sibling and the sampled alternative alike; the
leaves below the greedy sibling through later alternatives (forced deviations, mostly worse) do
not count against it, and every sibling is judged on one leaf, so there is no leaf-count credit.
Decisions that did not branch get 0: under a greedy trunk, the decisions after an alternative
are greedy decisions in states the alternative led to, and blaming them for its outcome would
push the greedy policy down.

``branch_first``: ``branch`` with the first child's continuation as the baseline instead of the
siblings' mean: an alternative is credited with how much better or worse its continuation did
than the first child's, and the first child (under a greedy trunk, the greedy decision) gets 0.
With siblings that are forced alternatives (``rollout.slot_alternatives``), the mean baseline
makes the greedy decision's advantage positive whenever the alternatives are worse on average:
one expensive alternative then raises the greedy decision even when a cheap one beat it.

``tree_mean``: every decision is compared with the mean reward of its tree's decisions of the
same kind (ignores the sibling structure; the ablation of tree credit).

With ``normalize_std`` advantages are divided by the standard deviation of rewards across the
whole tree (one scale per task): a per-sibling-group std would blow tiny differences between
two siblings up to ±0.7.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean, pstdev
from typing import Literal


@dataclass(frozen=True)
class NodeKey:
    node_id: str
    tree_id: str
    parent_id: str
    kind: str
    n_siblings: int
    sibling_index: int = 0


# (keys, rewards, normalize, aux): ``aux`` is one more reward per decision that some estimators need
# (rewards/score.py computes it): ``matched`` its matched baseline, ``branch`` its continuation's reward
Estimator = Callable[[Sequence[NodeKey], Sequence[float], bool, Sequence[float] | None], list[float]]
# which ``aux`` an estimator needs: the matched baseline's reward, the continuation's reward, or none
AuxKind = Literal["matched", "continuation"] | None
ESTIMATORS: dict[str, Estimator] = {}
ESTIMATOR_AUX: dict[str, AuxKind] = {}


def register_estimator(name: str, aux: AuxKind = None) -> Callable[[Estimator], Estimator]:
    def deco(fn: Estimator) -> Estimator:
        ESTIMATORS[name] = fn
        ESTIMATOR_AUX[name] = aux
        return fn

    return deco


def _tree_scale(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool) -> dict[str, float]:
    by_tree: dict[str, list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards):
        by_tree[k.tree_id].append(r)
    return {t: (pstdev(v) + 1e-6 if normalize and len(v) > 1 else 1.0) for t, v in by_tree.items()}


def _kind_means(keys: Sequence[NodeKey], rewards: Sequence[float]) -> dict[tuple[str, str], tuple[float, int]]:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards):
        groups[(k.tree_id, k.kind)].append(r)
    return {g: (fmean(v), len(v)) for g, v in groups.items()}


@register_estimator("sibling")
def sibling_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                       aux: Sequence[float] | None = None) -> list[float]:
    scale = _tree_scale(keys, rewards, normalize)
    kind_mean = _kind_means(keys, rewards)
    sib: dict[tuple[str, str], list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards):
        sib[(k.tree_id, k.parent_id)].append(r)
    out = []
    for k, r in zip(keys, rewards):
        group = sib[(k.tree_id, k.parent_id)]
        if k.n_siblings > 1 and len(group) > 1:
            base = fmean(group)
        else:
            mean, n = kind_mean[(k.tree_id, k.kind)]
            base = mean if n > 1 else r
        out.append((r - base) / scale[k.tree_id])
    return out


@register_estimator("sibling_only")
def sibling_only_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                            aux: Sequence[float] | None = None) -> list[float]:
    """Only decisions with siblings get credit (their reward minus their siblings' mean); a
    decision the path did not branch at gets 0, since nothing sampled from its state competed with it."""
    scale = _tree_scale(keys, rewards, normalize)
    sib: dict[tuple[str, str], list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards):
        sib[(k.tree_id, k.parent_id)].append(r)
    return [(r - fmean(sib[(k.tree_id, k.parent_id)])) / scale[k.tree_id]
            if k.n_siblings > 1 and len(sib[(k.tree_id, k.parent_id)]) > 1 else 0.0
            for k, r in zip(keys, rewards)]


@register_estimator("tree_mean")
def tree_mean_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                         aux: Sequence[float] | None = None) -> list[float]:
    scale = _tree_scale(keys, rewards, normalize)
    kind_mean = _kind_means(keys, rewards)
    return [(r - kind_mean[(k.tree_id, k.kind)][0]) / scale[k.tree_id] for k, r in zip(keys, rewards)]


@register_estimator("matched", aux="matched")
def matched_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                       aux: Sequence[float] | None = None) -> list[float]:
    """Reward minus the matched baseline ``aux`` (see the module docstring), over the tree's reward std."""
    baseline = _required_aux("matched", aux, rewards)
    scale = _tree_scale(keys, rewards, normalize)
    return [(r - b) / scale[k.tree_id] for k, r, b in zip(keys, rewards, baseline)]


@register_estimator("branch", aux="continuation")
def branch_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                      aux: Sequence[float] | None = None) -> list[float]:
    """``sibling_only`` on continuation rewards ``aux``: each sibling is judged by the one leaf its
    path reaches when every later branch point takes its first child (see the module docstring)."""
    return sibling_only_advantages(keys, _required_aux("branch", aux, rewards), normalize, None)


@register_estimator("branch_first", aux="continuation")
def branch_first_advantages(keys: Sequence[NodeKey], rewards: Sequence[float], normalize: bool = True,
                            aux: Sequence[float] | None = None) -> list[float]:
    """Continuation reward ``aux`` minus the first child's, at branch points only (module docstring)."""
    cont = _required_aux("branch_first", aux, rewards)
    scale = _tree_scale(keys, cont, normalize)
    first = {(k.tree_id, k.parent_id): c for k, c in zip(keys, cont) if k.n_siblings > 1 and k.sibling_index == 0}
    return [(c - first[(k.tree_id, k.parent_id)]) / scale[k.tree_id]
            if k.n_siblings > 1 and (k.tree_id, k.parent_id) in first else 0.0
            for k, c in zip(keys, cont)]


def _required_aux(name: str, aux: Sequence[float] | None, rewards: Sequence[float]) -> Sequence[float]:
    """``aux``, checked: one more reward per decision."""
    if aux is None or len(aux) != len(rewards):
        raise ValueError(f"the {name} estimator needs one more reward per decision (rewards/score.py computes them)")
    return aux


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]
