"""The training targets judged from metrics.json: exact verdicts on hand-built tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e3orch.evaluation.report import write_report
from e3orch.evaluation.targets import describe, judge


def row(accuracy: float, cost: float) -> dict[str, float]:
    return {"accuracy": accuracy, "cost": cost, "ie": accuracy / cost, "makespan_s": 1.0, "n": 140}


def metrics(e3orch: tuple[float, float], warmstart: tuple[float, float] = (0.7, 2.2), **extra: Any) -> dict[str, Any]:
    # the default pool of the sim's rules: heuristic 0.779 / 3.206, sequential 0.757 / 3.108, thrifty 0.729 / 2.186
    systems = {"e3orch": row(*e3orch), "warmstart": row(*warmstart), "heuristic": row(0.779, 3.206),
               "sequential": row(0.757, 3.108), "thrifty": row(0.729, 2.186), "single:mid-llm": row(0.557, 1.760)}
    return {"systems": systems, **extra}


def test_more_accurate_than_the_warm_start_beats_it_even_if_dearer() -> None:
    t = judge(metrics((0.786, 2.898), warmstart=(0.729, 2.186)))
    assert t["beats_warmstart"]["ok"] is True
    assert t["beats_warmstart"]["accuracy_gain"] == pytest.approx(0.057)


@pytest.mark.parametrize(("cost", "ratio", "ok"), [(1.87, 1.1653, True), (1.90, 1.1469, False)])
def test_equal_accuracy_needs_1_16_times_the_ie(cost: float, ratio: float, ok: bool) -> None:
    # one task of 140 less accurate (0.714 points: within one point of the warm start)
    t = judge(metrics((0.729, cost), warmstart=(0.736, 2.2)))["beats_warmstart"]
    assert t["ie_ratio"] == pytest.approx(ratio, abs=1e-4)
    assert t["ok"] is ok


def test_two_tasks_down_never_beats_the_warm_start_however_cheap() -> None:
    assert judge(metrics((0.721, 0.5), warmstart=(0.736, 2.2)))["beats_warmstart"]["ok"] is False


def test_a_warm_start_with_no_accuracy_has_no_ie_to_compare() -> None:
    t = judge(metrics((0.0, 1.0), warmstart=(0.0, 2.0)))["beats_warmstart"]
    assert t == {"ok": False, "accuracy_gain": 0.0, "ie_ratio": None}
    t = judge(metrics((0.007, 1.0), warmstart=(0.0, 2.0)))["beats_warmstart"]
    assert t["ok"] is True and t["ie_ratio"] is None
    assert describe(judge(metrics((0.0, 1.0), warmstart=(0.0, 2.0))))[0] == (
        "beats its warm start", "no", "accuracy +0.0 points, IE the warm start has none")


def test_ie_bar_counts_the_rules_within_three_points_or_above() -> None:
    # 0.786: heuristic (0.779) and sequential (0.757) are within 3 points, thrifty (0.729) is not:
    # the bar is 1.16 × sequential's 0.2436 = 0.2825; 0.786 / 2.898 = 0.2712 misses it
    t = judge(metrics((0.786, 2.898)))["default_pool"]
    assert t["rules_in_window"] == ["heuristic", "sequential"]
    assert t["ie_bar"] == pytest.approx(1.16 * 0.757 / 3.108, abs=1e-6)
    assert t["dominated_by"] == [] and t["ok"] is False
    # at 0.757 thrifty (0.729, above 0.727) counts: the bar is 1.16 × 0.3335 = 0.3868
    t = judge(metrics((0.757, 1.9)))["default_pool"]
    assert t["rules_in_window"] == ["heuristic", "sequential", "thrifty"]
    assert t["ie_bar"] == pytest.approx(0.3868, abs=1e-4) and t["ok"] is True  # 0.757 / 1.9 = 0.398
    # above every rule by more than 3 points: no bar
    t = judge(metrics((0.821, 4.888)))["default_pool"]
    assert t["rules_in_window"] == [] and t["ie_bar"] == 0.0 and t["ok"] is True


def test_a_single_executor_can_dominate_but_sets_no_bar() -> None:
    m = metrics((0.55, 1.0))
    m["systems"]["single:small-llm"] = row(0.5, 0.4)  # IE 1.25: a system, not an orchestrator
    t = judge(m)["default_pool"]
    assert t["rules_in_window"] == ["heuristic", "sequential", "thrifty"] and t["ok"] is True  # 0.55 ≥ 1.16 × 0.3335
    m["systems"]["single:mid-llm"] = row(0.6, 0.9)  # more accurate and cheaper
    assert judge(m)["default_pool"] == {**t, "ok": False, "dominated_by": ["single:mid-llm"]}


def test_unseen_pools_need_an_ie_strictly_above_every_rule() -> None:
    m = metrics((0.786, 2.898),
                transfer={"systems": {"e3orch": row(0.643, 2.653), "thrifty": row(0.643, 2.656),
                                      "single:nimbus-mini": row(0.236, 0.846)}},
                generated={"systems": {"e3orch": row(0.688, 2.936), "thrifty": row(0.688, 2.936)}})
    t = judge(m)
    assert t["transfer_pool"]["ok"] is True and t["transfer_pool"]["best_rule"] == "thrifty"  # 0.2424 > 0.2421
    assert t["generated_pools"]["ok"] is False  # equal is not above
    assert (t["met"], t["judged"]) == (2, 4)  # beats its warm start (0.786 > 0.7) and the transfer pool


def test_missing_systems_or_pools_are_not_judged() -> None:
    m = metrics((0.786, 2.898))
    del m["systems"]["warmstart"]
    t = judge(m)
    assert t["beats_warmstart"]["ok"] is None and t["transfer_pool"]["ok"] is None
    assert (t["met"], t["judged"]) == (0, 1)  # only the default pool: 0.271 against the bar of 0.283
    assert judge({"systems": {"heuristic": row(0.779, 3.206)}}) == {"met": 0, "judged": 0,
                                                                   "why": "no e3orch in the evaluation"}


def test_report_states_the_targets(tmp_path: Path) -> None:
    m = metrics((0.786, 2.898), warmstart=(0.729, 2.186),
                transfer={"systems": {"e3orch": row(0.643, 2.653), "thrifty": row(0.643, 2.656)}})
    m["targets"] = judge(m)
    text = write_report(m, tmp_path).read_text()
    assert "## Training targets: 2 of 3 met" in text
    assert "| beats its warm start | yes | accuracy +5.7 points, IE 0.81× the warm start's |" in text
    assert ("| default pool: non-dominated, IE bar | no | dominated by nothing; IE 0.271 against 0.283 "
            "(1.16 × the best IE of the rules within 3 points or above: heuristic, sequential) |") in text
    assert "| transfer pool: IE above every rule | yes | IE 0.2424 against thrifty's 0.2421 |" in text  # 3 digits: equal
    assert "| generated pools: IE above every rule | n/a |" in text
    assert describe(judge({"systems": {}})) == []
