"""Simulated executors: the success model, inputs, cramming, injected faults and determinism."""

from __future__ import annotations

import asyncio
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from e3orch.data.tasks import Requirement, Task
from e3orch.executors.base import ConfigError, ExecutorSpec, SubtaskRequest, build_pool, load_pool_specs
from e3orch.executors.simulated import SimulatedExecutor, parse_values

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POOL = REPO / "configs" / "executors" / "default.yaml"

TASK = Task(
    task_id="hand-1",
    split="eval",
    domain="multihop",
    benchmark="sim/multihop",
    question="P1: Find a.\nP2: Compute b, using P1.\nP3: Decide c, using P2.\nP4: Decide d, using P1 and P2.\n"
             "Final answer: the result of P3.",
    answer="yes-111",
    requirements=(
        Requirement("P1", "retrieve", 0, (), "Norvik11"),
        Requirement("P2", "compute", 1, ("P1",), "4242"),
        Requirement("P3", "reason", 2, ("P2",), "yes-111"),
        Requirement("P4", "reason", 0, ("P1", "P2"), "no-222"),
    ),
)


def spec(name: str = "sim", skills: dict[str, float] | None = None, **extra: Any) -> ExecutorSpec:
    return ExecutorSpec.model_validate({
        "name": name, "kind": "simulated",
        "skills": skills if skills is not None else {"retrieve": 1.0, "compute": 1.0, "code": 1.0, "reason": 1.0},
        "price": {"input_per_1k": 1.0, "output_per_1k": 3.0},
        "latency": {"base_s": 0.5, "per_1k_tokens_s": 2.0},
        **extra,
    })


def executor(**kw: Any) -> SimulatedExecutor:
    e = build_pool([spec(**kw)])["sim" if "name" not in kw else kw["name"]]
    assert isinstance(e, SimulatedExecutor)
    return e


def request(instruction: str, *, seed: int = 1, state: dict[str, str] | None = None,
            context: tuple[tuple[str, str], ...] = (), task: Task | None = TASK) -> SubtaskRequest:
    return SubtaskRequest(task_id="hand-1", subtask_id="S1", instruction=instruction, context=context,
                          task=task, state=state or {}, seed=seed)


def default_executor(name: str) -> SimulatedExecutor:
    e = build_pool(DEFAULT_POOL)[name]
    assert isinstance(e, SimulatedExecutor)
    return e


# -- determinism ------------------------------------------------------------------------------


def test_same_seed_same_result_different_seed_different_noise() -> None:
    e = default_executor("mid-llm")
    req = request("Solve P1.", seed=123)
    assert e.simulate(req) == e.simulate(req)
    assert asyncio.run(e.run(req)) == e.simulate(req)
    assert default_executor("mid-llm").simulate(req) == e.simulate(req)  # a fresh executor too
    others = {e.simulate(request("Solve P1.", seed=s)).latency_s for s in range(10)}
    assert len(others) == 10


# -- the success model ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "skill", "difficulty", "k", "expected"),
    [
        ("mid-llm", "reason", 0, 1, 0.82),
        ("mid-llm", "reason", 2, 1, 0.82 ** 3),
        ("mid-llm", "reason", 2, 3, 0.82 ** 3 * 0.8 ** 2),
        ("small-llm", "code", 1, 1, 0.55 ** 3.2),
        ("small-llm", "compute", 2, 2, 0.74 ** 5.4 * 0.8),
        ("frontier-llm", "retrieve", 1, 1, 0.86 ** 1.6),
        ("calculator", "retrieve", 0, 1, 0.0),
        ("web-search", "retrieve", 2, 1, 0.84 ** 4.0),
    ],
)
def test_success_probability_on_the_default_pool(name: str, skill: str, difficulty: int, k: int, expected: float) -> None:
    assert default_executor(name).success_probability(skill, difficulty, k) == pytest.approx(expected, rel=1e-12)


def test_success_probability_uses_the_spec_options() -> None:
    e = executor(skills={"code": 0.9}, difficulty_sensitivity=0.5, cram_penalty=0.5)
    assert e.success_probability("code", 2, 1) == pytest.approx(0.9 ** 2.0)
    assert e.success_probability("code", 1, 4) == pytest.approx(0.9 ** 1.5 * 0.5 ** 3)
    assert e.success_probability("reason", 0, 1) == 0.0  # a skill the profile does not list


def test_empirical_success_rate_follows_the_probability() -> None:
    e = default_executor("mid-llm")  # compute 0.84, difficulty 1, sensitivity 1 -> 0.84**2
    state = {"P1": "Norvik11"}
    hits = [parse_values(e.simulate(request("Solve P2.", seed=s, state=state)).output)["P2"] == "4242"
            for s in range(2000)]
    assert mean(hits) == pytest.approx(0.84 ** 2, abs=0.04)


# -- inputs -----------------------------------------------------------------------------------


def test_perfect_executor_with_correct_inputs_is_correct() -> None:
    e = executor()
    out = e.simulate(request("Solve P1."))
    assert out.ok and out.error is None
    assert parse_values(out.output) == {"P1": "Norvik11"}
    assert out.output.startswith("P1 = Norvik11 (confidence ")
    # inputs from the episode's workspace ...
    assert parse_values(e.simulate(request("Solve P2.", state={"P1": "Norvik11"})).output) == {"P2": "4242"}
    # ... or from a dependency's output in the plan
    ctx = (("S0", "P1 = Norvik11 (confidence 0.90)"),)
    assert parse_values(e.simulate(request("Solve P2.", context=ctx)).output) == {"P2": "4242"}


def test_missing_input_fails_that_part() -> None:
    e = executor()
    out = e.simulate(request("Solve P2."))
    assert out.ok  # the call itself worked; the part could not
    assert out.output == "P2: cannot proceed, missing input P1"
    assert parse_values(out.output) == {}
    out = e.simulate(request("Solve P4.", state={"P2": "4242"}))
    assert out.output == "P4: cannot proceed, missing input P1"
    out = e.simulate(request("Solve P4."))
    assert out.output == "P4: cannot proceed, missing input P1, P2"


def test_wrong_input_propagates_as_a_wrong_value() -> None:
    e = executor()
    for seed in range(20):
        out = e.simulate(request("Solve P2.", seed=seed, state={"P1": "Wrongvik99"}))
        v = parse_values(out.output)
        assert out.ok and set(v) == {"P2"} and v["P2"] != "4242"
        assert v["P2"].isdigit()  # still a plausible value of the part's skill


def test_cramming_solves_a_chain_inside_one_subtask_and_costs_success() -> None:
    perfect = executor(cram_penalty=1.0)
    out = perfect.simulate(request("Solve P1, P2 and P3."))
    assert parse_values(out.output) == {"P1": "Norvik11", "P2": "4242", "P3": "yes-111"}
    hopeless = executor(cram_penalty=0.0)  # any second part makes every part fail
    v = parse_values(hopeless.simulate(request("Solve P1, P2 and P3.")).output)
    assert set(v) == {"P1", "P2", "P3"}
    assert all(v[p] != r.value for p, r in zip(("P1", "P2", "P3"), TASK.requirements))
    assert parse_values(hopeless.simulate(request("Solve P1.")).output) == {"P1": "Norvik11"}


def test_zero_rate_never_succeeds() -> None:
    calc = default_executor("calculator")
    for seed in range(30):
        assert parse_values(calc.simulate(request("Solve P1.", seed=seed)).output)["P1"] != "Norvik11"


def test_confidence_is_higher_for_correct_values_on_average() -> None:
    e = default_executor("small-llm")
    right, wrong = [], []
    for seed in range(600):
        out = e.simulate(request("Solve P3.", seed=seed, state={"P2": "4242"}))
        conf = float(out.output.split("(confidence ")[1].rstrip(")"))
        assert 0.0 < conf < 1.0
        (right if parse_values(out.output)["P3"] == "yes-111" else wrong).append(conf)
    assert right and wrong
    assert mean(right) > mean(wrong) + 0.15


def test_instruction_naming_no_part() -> None:
    out = executor().simulate(request("Do the whole thing."))
    assert out.ok
    assert out.output.startswith("No part of the task is named")
    assert executor().simulate(request("Solve P9.")).output.startswith("No part of the task is named")


# -- cost and latency -------------------------------------------------------------------------


def test_cost_and_latency_follow_the_spec() -> None:
    e = executor(latency_noise=0.0)
    out = e.simulate(request("Solve P1."))
    assert out.cost == pytest.approx((out.input_tokens * 1.0 + out.output_tokens * 3.0) / 1000)
    assert out.latency_s == pytest.approx(0.5 + 2.0 * (out.input_tokens + out.output_tokens) / 1000)
    assert out.input_tokens == 40 + int(1.3 * 2)
    verbose = executor(latency_noise=0.0, verbosity=3.0).simulate(request("Solve P1."))
    assert verbose.output_tokens > 2 * out.output_tokens


# -- injected faults --------------------------------------------------------------------------


def test_fault_rate_one_is_an_executor_error_with_partial_cost() -> None:
    normal = executor().simulate(request("Solve P1."))
    out = executor(fault_rate=1.0).simulate(request("Solve P1."))
    assert (out.ok, out.output, out.error) == (False, "", "executor error: simulated fault")
    assert out.cost == pytest.approx(0.3 * normal.cost)
    assert out.latency_s == pytest.approx(0.3 * normal.latency_s)


def test_timeout_rate_one_is_a_timeout_with_the_configured_latency() -> None:
    out = executor(timeout_rate=1.0).simulate(request("Solve P1."))
    assert (out.ok, out.error, out.latency_s) == (False, "timeout after 60s", 60.0)
    out = executor(timeout_rate=1.0, timeout_s=7.5).simulate(request("Solve P1."))
    assert (out.ok, out.error, out.latency_s) == (False, "timeout after 7.5s", 7.5)


def test_slow_rate_one_is_five_times_slower_and_otherwise_identical() -> None:
    normal = executor().simulate(request("Solve P1."))
    slow = executor(slow_rate=1.0).simulate(request("Solve P1."))
    assert slow.ok and slow.output == normal.output and slow.cost == normal.cost
    assert slow.latency_s == pytest.approx(5 * normal.latency_s)


def test_sleep_scale_really_waits_but_reports_the_same_latency() -> None:
    e = executor(sleep_scale=0.001)
    assert e.virtual_time is False
    assert executor().virtual_time is True
    req = request("Solve P1.")
    assert asyncio.run(e.run(req)) == executor().simulate(req)


# -- configuration ----------------------------------------------------------------------------


def test_unknown_option_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match=r"executor 'sim' \(simulated\): unknown option\(s\) \['fault_rte'\]"):
        build_pool([spec(fault_rte=0.1)])
    with pytest.raises(ValueError, match="unknown option"):
        SimulatedExecutor(spec(fault_rte=0.1))


def test_missing_skills_is_a_clear_config_error() -> None:
    bare = ExecutorSpec.model_validate({"name": "sim", "kind": "simulated"})
    with pytest.raises(ConfigError, match="needs 'skills'"):
        build_pool([bare])


def test_bad_skill_name_or_rate_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "pool.yaml"
    f.write_text("executors:\n  - name: a\n    kind: simulated\n    skills: {cooking: 0.5}\n")
    with pytest.raises(ConfigError, match=r"executors\[0\]\.skills.*unknown skill 'cooking'"):
        load_pool_specs(f)
    f.write_text("executors:\n  - name: a\n    kind: simulated\n    skills: {code: 1.5}\n")
    with pytest.raises(ConfigError, match=r"executors\[0\]\.skills"):
        load_pool_specs(f)


def test_non_numeric_option_names_the_option() -> None:
    with pytest.raises(ConfigError, match="fault_rate"):
        build_pool([spec(fault_rate="often")])


def test_free_form_call_without_a_task() -> None:
    e = default_executor("mid-llm")
    out = e.simulate(request("Summarise the report", task=None))
    assert out.ok and out.error is None
    assert out.output == "[mid-llm] simulated reply to: Summarise the report"
    assert out.cost == pytest.approx(e.spec.cost(out.input_tokens, out.output_tokens)) and out.cost > 0
    assert out.latency_s > 0
