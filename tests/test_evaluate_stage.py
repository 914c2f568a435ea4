"""evaluate-all's jobs: a pool's systems run apart give each system the episodes it gets beside the others."""

from __future__ import annotations

from e3orch.config import load_params
from e3orch.data.sim import generate_split
from e3orch.evaluation.stage import run_pool_systems


def test_systems_run_apart_have_the_episodes_they_have_together() -> None:
    params = load_params("params.yaml", {"evaluate": {"baselines": ["heuristic", "thrifty", "random"],
                                                      "single_executors": True}})
    tasks = generate_split(0, "eval", 2)
    pool = "configs/executors/default.yaml"
    together, _ = run_pool_systems(params, tasks, pool, {})
    assert list(together)[:3] == ["heuristic", "thrifty", "random"] and "single:frontier-llm" in together
    alone, _ = run_pool_systems(params, tasks, pool, {}, only=["thrifty"])
    rest, _ = run_pool_systems(params, tasks, pool, {}, skip=["heuristic", "thrifty"])
    assert list(alone) == ["thrifty"]
    assert list(rest) == [n for n in together if n not in ("heuristic", "thrifty")]  # in the same order
    for name, episodes in {**alone, **rest}.items():
        assert [e.to_dict() for e in episodes] == [e.to_dict() for e in together[name]], name
    costs = {name: sum(e.cost for e in episodes) for name, episodes in together.items()}
    assert len(set(costs.values())) == len(costs)  # every system's episodes differ: the check can fail
