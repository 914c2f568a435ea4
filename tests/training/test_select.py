"""Which RL round a run writes (train.select), on hand-built validation records."""

from __future__ import annotations

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
