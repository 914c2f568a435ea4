"""The systems table: every column, exact values, sorted by accuracy."""

from e3orch.evaluation.report import pareto_front, render_table

SYSTEMS = {
    "heuristic": {"accuracy": 0.8, "cost": 3.2, "ie": 0.25, "makespan_s": 5.0, "serial_latency_s": 6.0,
                  "defects_per_episode": 0.0, "budget_failures": 0, "n": 10},
    "e3orch": {"accuracy": 0.7, "cost": 2.5, "ie": 0.28, "makespan_s": 4.25, "serial_latency_s": 5.5,
               "defects_per_episode": 1.25, "budget_failures": 3, "n": 10},
}


def test_markdown_table_states_defects_and_unanswered_episodes() -> None:
    lines = render_table(SYSTEMS, markdown=True).splitlines()
    assert lines[0] == ("| system | accuracy | cost/task | IE (acc/cost) | makespan s | serial s | defects/ep "
                        "| no answer | n |")
    assert lines[2] == "| heuristic | 0.800 | 3.200 | 0.250 | 5.00 | 6.00 | 0.00 | 0 | 10 |"
    assert lines[3] == "| e3orch | 0.700 | 2.500 | 0.280 | 4.25 | 5.50 | 1.25 | 3 | 10 |"


def test_terminal_table_aligns_columns() -> None:
    lines = render_table(SYSTEMS).splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[1].split() == ["heuristic", "0.800", "3.200", "0.250", "5.00", "6.00", "0.00", "0", "10"]


def test_pareto_front_drops_dominated_systems() -> None:
    worse = {"accuracy": 0.6, "cost": 2.6, "ie": 0.23, "makespan_s": 1.0, "n": 10}
    assert pareto_front({**SYSTEMS, "worse": worse}) == ["e3orch", "heuristic"]
