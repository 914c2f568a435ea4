"""Which RL round a run writes (train.select), on hand-built validation records."""

from __future__ import annotations

import json
from pathlib import Path

from e3orch.training.trainer import select_round

# round 0 = the warm start: 0.610 at 3.39 (accuracy/cost 0.180)
VAL = [
    {"round": 0, "val_accuracy": 0.610, "val_cost": 3.39},
    {"round": 1, "val_accuracy": 0.590, "val_cost": 3.15},  # 2 points less accurate: out of tolerance
    {"round": 2, "val_accuracy": 0.610, "val_cost": 2.86},  # 0.213
    {"round": 3, "val_accuracy": 0.605, "val_cost": 2.75},  # 0.5 points less accurate, 0.220: the efficient pick
    {"round": 4, "val_accuracy": 0.571, "val_cost": 2.00},  # 0.286, but 3.9 points less accurate
    {"round": 5, "val_accuracy": 0.629, "val_cost": 3.60},  # the most accurate
]


def test_best_is_the_most_accurate_then_the_cheaper() -> None:
    assert select_round(VAL, "best")["round"] == 5  # type: ignore[index]
    tie = [*VAL, {"round": 6, "val_accuracy": 0.629, "val_cost": 3.10}]
    assert select_round(tie, "best")["round"] == 6  # type: ignore[index]


def test_efficient_is_the_best_ratio_within_the_tolerance() -> None:
    assert select_round(VAL, "efficient", 0.01)["round"] == 3  # type: ignore[index]
    assert select_round(VAL, "efficient", 0.0)["round"] == 2  # type: ignore[index]
    assert select_round(VAL, "efficient", 0.05)["round"] == 4  # type: ignore[index]


def test_efficient_keeps_the_warm_start_when_no_round_is_both_as_accurate_and_more_efficient() -> None:
    worse = [VAL[0], VAL[1], {"round": 2, "val_accuracy": 0.61, "val_cost": 3.50}]
    assert select_round(worse, "efficient")["round"] == 0  # type: ignore[index]
    assert select_round([], "efficient") is None


def _pools(rnd: int, training: tuple[float, float], randomized: tuple[float, float]) -> dict[str, object]:
    """A validation entry with per-pool figures (train.validate_pools); the pooled figures are the means."""
    return {"round": rnd, "val_accuracy": (training[0] + randomized[0]) / 2, "val_cost": (training[1] + randomized[1]) / 2,
            "val_pools": {"training": {"accuracy": training[0], "cost": training[1]},
                      "randomized": {"accuracy": randomized[0], "cost": randomized[1]}}}


# warm start: IE 0.25 on the training pool, 0.20 on randomized pools
POOLS = [
    _pools(0, (0.70, 2.80), (0.60, 3.00)),
    _pools(1, (0.69, 2.90), (0.60, 2.20)),  # the best pooled accuracy/cost (0.253), but less efficient on the training pool
    _pools(2, (0.70, 2.50), (0.60, 2.70)),  # gains 1.12x and 1.11x: the smaller, 1.11, is its score
    _pools(3, (0.71, 2.60), (0.62, 2.90)),  # gains 1.09x and 1.07x
    _pools(4, (0.70, 2.00), (0.55, 2.00)),  # 1.40x and 1.38x, but 5 points less accurate on randomized pools
]


def test_efficient_with_pools_takes_the_smallest_gain_over_pools_and_holds_accuracy_on_each() -> None:
    assert select_round(POOLS, "efficient", 0.01)["round"] == 2  # type: ignore[index]
    assert select_round(POOLS, "efficient", 0.05)["round"] == 4  # type: ignore[index]
    # pooled figures alone would pick round 1 (0.253 against round 2's 0.250)
    pooled = [{k: v for k, v in e.items() if k != "val_pools"} for e in POOLS]
    assert select_round(pooled, "efficient", 0.01)["round"] == 1  # type: ignore[index]
    assert select_round([POOLS[0], POOLS[1]], "efficient")["round"] == 0  # type: ignore[index]
    assert select_round([POOLS[0], POOLS[1], POOLS[3]], "efficient")["round"] == 3  # type: ignore[index]
    # best ignores the per-pool figures: the most accurate pooled
    assert select_round(POOLS, "best")["round"] == 3  # type: ignore[index]


def test_an_undone_round_is_never_written() -> None:
    """train.hold_accuracy: a round whose weights were undone (``kept: False``) is not a candidate,
    however its figures compare; the warm start's entry carries no flag and counts as kept."""
    undone = [VAL[0], {**VAL[5], "kept": False}, {**VAL[3], "kept": True}, {**VAL[2], "kept": False}]
    assert select_round(undone, "best")["round"] == 0  # type: ignore[index]  # round 5 (most accurate) is gone
    assert select_round(undone, "efficient", 0.01)["round"] == 3  # type: ignore[index]
    assert select_round(undone, "efficient", 0.0)["round"] == 0  # type: ignore[index]  # round 2 is gone


def test_a_warm_start_under_half_its_teachers_accuracy_is_warned_about(tmp_path: Path) -> None:
    from e3orch.training.trainer import warm_start_warning

    (tmp_path / "e3orch_policy.json").write_text(json.dumps({"warmstart": {"teacher_accuracy": 0.676}}))
    warning = warm_start_warning(0.071, tmp_path)  # seed 2's warm start with policy.menu_rank: need (docs/benchmarks.md)
    assert warning is not None and "0.071 is under half its teachers' 0.676" in warning and "warmstart.seed" in warning
    assert warm_start_warning(0.338, tmp_path) is None  # exactly half: no warning
    assert warm_start_warning(0.337, tmp_path) is not None
    assert warm_start_warning(0.0, tmp_path / "missing") is None  # no teachers' figure (e.g. a base_model policy)
    (tmp_path / "e3orch_policy.json").write_text(json.dumps({"kind": "e3orch-default-policy"}))
    assert warm_start_warning(0.0, tmp_path) is None
