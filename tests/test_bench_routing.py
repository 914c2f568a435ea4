"""The routing probe: its parsing of plans, and one tiny run end to end."""

from __future__ import annotations

from pathlib import Path

from e3orch.benchmarks.routing import bench_routing, first_executor


def test_first_executor_reads_the_first_subtask_line() -> None:
    assert first_executor("S1 | E3 | - | Solve P1.\nS2 | E1 | S1 | Solve P2.") == "E3"
    assert first_executor("S1 |web-search| - | look it up") == "web-search"
    assert first_executor("MILESTONE: Solve P1") is None
    assert first_executor("") is None


def test_bench_routing_tiny_run(tiny_params_file: Path) -> None:
    r = bench_routing(str(tiny_params_file), quick=True, eval_tasks=4)
    assert r["plan_decisions"] > 0 and r["milestone_decisions"] > 0
    for key in ("handle_agreement", "majority_agreement", "uniform_chance", "plan_exact", "milestone_exact"):
        assert 0.0 <= r[key] <= 1.0, key
    # the best constant answer scores at least the share of its own handle, which is ≥ 1/pool
    assert r["majority_agreement"] >= 1 / 7
    assert r["sft_steps"] > 0
