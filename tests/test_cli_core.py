"""The core commands through ``e3orch.cli.main``: episode, evaluate, prepare, bench engine.

Checks the DESIGN §5 interfaces (JSON fields, metrics.json shape, exit codes), not numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e3orch.cli import main
from e3orch.config import load_params
from e3orch.data.sim import generate_split
from e3orch.data.tasks import read_tasks

REPO = Path(__file__).resolve().parents[1]
PARAMS = str(REPO / "params.yaml")
DOMAINS7 = {"multihop", "math", "code", "table", "factcheck", "planning", "research"}


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)
    return REPO


def episode_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    rc = main(["episode", "--env", "sim", "--json", *args])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


def test_episode_json_has_the_design_fields(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ep = episode_json(capsys, "--domain", "table", "--seed", "3", "--orchestrator", "heuristic")
    for key in ("task_id", "question", "milestones", "answer", "correct", "score", "cost", "makespan_s",
                "serial_latency_s"):
        assert key in ep
    assert ep["task_id"].startswith("sim-table-eval-")
    assert isinstance(ep["question"], str) and "P1:" in ep["question"]
    assert isinstance(ep["correct"], bool) and ep["score"] in (0.0, 1.0)
    assert ep["milestones"]
    for m in ep["milestones"]:
        assert isinstance(m["text"], str) and m["text"]
        assert [set(s) >= {"id", "executor", "instruction", "deps"} for s in m["plan"]] == [True] * len(m["plan"])
        assert [r["id"] for r in m["results"]] == [s["id"] for s in m["plan"]]
        for r in m["results"]:
            assert set(r) >= {"id", "executor", "ok", "cost", "latency_s", "output"}
            assert isinstance(r["ok"], bool) and r["cost"] >= 0 and r["latency_s"] >= 0
        for s in m["plan"]:
            assert isinstance(s["deps"], list)
    assert ep["cost"] == pytest.approx(sum(r["cost"] for m in ep["milestones"] for r in m["results"]), abs=1e-4)
    assert ep["serial_latency_s"] == pytest.approx(
        sum(r["latency_s"] for m in ep["milestones"] for r in m["results"]), abs=1e-4)
    assert 0 < ep["makespan_s"] <= ep["serial_latency_s"] + 1e-9


def test_episode_is_reproducible_and_seed_picks_the_domain(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = episode_json(capsys, "--seed", "11", "--orchestrator", "upfront")
    b = episode_json(capsys, "--seed", "11", "--orchestrator", "upfront")
    assert a == b
    domains = {episode_json(capsys, "--seed", str(s))["task_id"].split("-")[1] for s in range(12)}
    assert len(domains) >= 3 and domains <= DOMAINS7


@pytest.mark.parametrize("domain", ["factcheck", "research", "table"])
def test_parallel_plans_finish_before_their_serial_sum(in_repo: Path, capsys: pytest.CaptureFixture[str],
                                                      domain: str) -> None:
    for seed in range(4):
        ep = episode_json(capsys, "--domain", domain, "--seed", str(seed), "--orchestrator", "heuristic")
        assert max(len(m["plan"]) for m in ep["milestones"]) >= 2
        assert ep["makespan_s"] < ep["serial_latency_s"]


def test_episode_plain_text_trace(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["episode", "--domain", "math", "--seed", "2", "--orchestrator", "sequential"]) == 0
    out = capsys.readouterr().out
    assert "milestone 1:" in out and "answer:" in out and "makespan=" in out


def test_the_text_trace_shows_defects_outside_any_plan() -> None:
    from e3orch.commands.episode import trace_lines
    from e3orch.orchestration.types import Defect, Episode

    ep = Episode("t1", "sim/math", "math", "Q?", "p", [], "", False, 0.0, 0.0, 0.0, 0.0,
                 defects=[Defect("unparseable", "no MILESTONE: or ANSWER: line")], budget_failure="milestone_budget")
    lines = trace_lines(ep, "p")
    assert "defect: unparseable no MILESTONE: or ANSWER: line" in lines
    assert lines[-1].endswith("budget_failure=milestone_budget")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--orchestrator", "clever"], "unknown orchestrator 'clever'"),
        (["--orchestrator", "single:gpt-99"], "gpt-99"),
        (["--orchestrator", "./no/such/checkpoint"], "not a policy checkpoint"),
        (["--executors", "configs/executors/nope.yaml"], "executor pool file not found"),
        (["--domain", "cooking"], "cooking"),
        (["--task-id", "sim-nope-eval-00000"], "sim-nope-eval-00000"),
        (["--benchmark", "humaneval"], "add --env live"),
    ],
)
def test_episode_bad_input_is_exit_2_with_one_line(in_repo: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], needle: str) -> None:
    rc = main(["episode", "--seed", "1", "--json", *args])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith("e3orch episode: error: ")
    assert "\n" not in err and "Traceback" not in err
    assert needle in err


def test_bad_pool_file_is_exit_2(tmp_path: Path, in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("executors:\n  - name: a\n    kind: quantum\n")
    rc = main(["episode", "--executors", str(pool), "--json"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "unknown executor kind 'quantum'" in err


def test_no_command_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2


# -- evaluate ---------------------------------------------------------------------------------


def test_evaluate_writes_metrics_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no data/ here: tasks are generated; the pool resolves to the checkout
    rc = main(["evaluate", "--params", PARAMS, "--limit", "5", "--out", "out"])
    assert rc == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    systems = metrics["systems"]
    pool_names = ["frontier-llm", "mid-llm", "small-llm", "code-llm", "reasoner", "calculator", "web-search"]
    baselines = load_params(PARAMS).evaluate.baselines
    assert {"heuristic", "upfront", "sequential"} <= set(baselines)
    assert set(systems) == {*baselines, *(f"single:{e}" for e in pool_names)}
    for name, m in systems.items():
        assert set(m) >= {"accuracy", "cost", "makespan_s", "ie", "n"}
        assert m["n"] == 35
        assert 0.0 <= m["accuracy"] <= 1.0 and m["cost"] > 0 and m["makespan_s"] > 0
        assert m["ie"] == pytest.approx(m["accuracy"] / m["cost"], rel=1e-3, abs=1e-6), name
    per = metrics["per_benchmark"]
    assert set(per) == {f"sim/{d}" for d in DOMAINS7}
    for bench in per.values():
        assert set(bench) == set(systems)
        for m in bench.values():
            assert set(m) >= {"accuracy", "cost"}
            assert m["n"] == 5
    for name, m in systems.items():  # per-benchmark means average to the overall mean (equal n)
        assert m["accuracy"] == pytest.approx(sum(per[b][name]["accuracy"] for b in per) / 7, abs=1e-5)
    lines = (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 35 * len(systems)
    assert {json.loads(x)["system"] for x in lines} == set(systems)


def test_evaluate_selected_systems_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["evaluate", "--params", PARAMS, "--orchestrator", "heuristic", "--orchestrator", "single:mid-llm",
               "--limit", "2", "--out", str(tmp_path / "o"), "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert printed == written
    assert set(written["systems"]) == {"heuristic", "single:mid-llm"}
    assert written["systems"]["heuristic"]["n"] == 14


def test_evaluate_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for out in ("a", "b"):
        assert main(["evaluate", "--params", PARAMS, "--orchestrator", "heuristic", "--limit", "3", "--out", out]) == 0
    a, b = (json.loads((tmp_path / o / "metrics.json").read_text()) for o in ("a", "b"))
    assert a["systems"] == b["systems"]


def test_evaluate_bad_orchestrator_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["evaluate", "--params", PARAMS, "--orchestrator", "clever", "--limit", "1", "--out", "o"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "unknown orchestrator 'clever'" in err


# -- prepare and bench ------------------------------------------------------------------------


def test_prepare_writes_validated_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("prepare:\n  seed: 4\n  train_per_domain: 3\n  eval_per_domain: 2\n  domains: [math, table]\n")
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "--params", str(params), "--out-dir", "d"]) == 0
    assert read_tasks(tmp_path / "d" / "sim_train.parquet") == generate_split(4, "train", 3, ["math", "table"])
    assert read_tasks(tmp_path / "d" / "sim_eval.parquet") == generate_split(4, "eval", 2, ["math", "table"])


def test_bad_params_file_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("engine:\n  max_milestone: 3\n")
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "--params", str(params)]) == 2
    err = capsys.readouterr().err.strip()
    assert "engine.max_milestone" in err and "\n" not in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "train", "--params", "missing.yaml"], "params file not found: missing.yaml"),
    (["evaluate-all", "--params", "missing.yaml"], "params file not found: missing.yaml"),
    (["evaluate-all", "--policy", "no-such-policy"], "--policy no-such-policy: no such policy folder"),
    (["rollout", "--policy", "./no-such-policy"], "./no-such-policy: not a policy checkpoint directory"),
    (["bench", "engine", "--threads", "0"], "--threads 0: must be at least 1"),
    (["evaluate", "--benchmark", "humaneval", "--out", "x"], "add --env live"),
    (["evaluate", "--limit", "-1", "--out", "x"], "--limit must be >= 0"),
])
def test_named_inputs_that_do_not_exist_are_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], argv: list[str],
                                                   needle: str) -> None:
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the defaults, which are valid
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err


def test_a_cuda_device_without_cuda_is_a_one_line_error() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    from e3orch.policy.backends.hf import TransformersBackend

    with pytest.raises(ValueError, match=r"^policy.device: cuda:1, but this torch .* sees no CUDA device"):
        TransformersBackend(str(REPO), device="cuda:1")


def test_bench_engine_json_quick(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "engine", "--json", "--quick"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"calls_per_s", "makespan_over_critical_path"} <= set(result)
    assert isinstance(result["calls_per_s"], float) and isinstance(result["makespan_over_critical_path"], float)
    # quick: 5 rounds of a 100-wide plan, a 50-deep one and a diamond (a root, then 5 layers of 10 fanning into 1)
    assert result["calls_measured"] == (100 + 50 + (1 + 5 * 11)) * 5
    # a makespan can never beat the critical path of the same latencies
    assert min(result["makespan_over_critical_path_by_shape"].values()) >= 1.0
