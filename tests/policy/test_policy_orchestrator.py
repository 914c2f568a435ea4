"""A freshly created default policy runs episodes to the end; its malformed decisions are defects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, write_tiny_params

from e3orch.cli import main


@pytest.fixture(scope="module")
def fresh_policy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fresh")
    params = write_tiny_params(root, engine={"max_milestones": 3})
    assert main(["init-policy", "--params", str(params), "--out", str(root / "init")]) == 0
    return root / "init", params


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fresh_checkpoint_episode_ends_with_recorded_defects(fresh_policy, seed: int, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ckpt, params = fresh_policy
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    assert main(["episode", "--params", str(params), "--seed", str(seed), "--orchestrator", str(ckpt), "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["answer"] or trace["budget_failure"]
    codes = {d["code"] for d in trace["defects"]}
    # an untrained model writes nonsense: recorded, never raised
    assert codes & {"unparseable", "bad_line", "unknown_executor", "empty_plan", "milestone_budget"}
    if trace["budget_failure"]:
        assert "no_answer" in codes


def test_checkpoint_name_in_evaluate(fresh_policy, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ckpt, params = fresh_policy
    monkeypatch.chdir(REPO)
    out = tmp_path / "ev"
    assert main(["evaluate", "--params", str(params), "--orchestrator", str(ckpt), "--orchestrator", "heuristic",
                 "--limit", "1", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["systems"]) == {str(ckpt), "heuristic"}
    assert m["systems"][str(ckpt)]["n"] == 2


def test_commands_decode_with_the_params_file_they_are_given(fresh_policy, tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``--params`` reaches the policy: the same checkpoint, greedy (the repo's params.yaml) and
    sampling at temperature 5 (the file's policy.eval_temperature), writes different decisions."""
    ckpt, params = fresh_policy
    hot = write_tiny_params(tmp_path, engine={"max_milestones": 3}, policy={"eval_temperature": 5.0})
    monkeypatch.chdir(REPO)

    def trace(params_file: Path) -> str:
        capsys.readouterr()
        assert main(["episode", "--params", str(params_file), "--seed", "0", "--orchestrator", str(ckpt), "--json"]) == 0
        return capsys.readouterr().out  # milestones, or the defects that quote the unparseable decisions

    assert trace(params) != trace(hot)
    out = {name: tmp_path / name for name in ("cold", "hot")}
    for name, file in (("cold", params), ("hot", hot)):
        assert main(["evaluate", "--params", str(file), "--orchestrator", str(ckpt), "--limit", "1",
                     "--out", str(out[name])]) == 0
    assert (out["cold"] / "episodes.jsonl").read_text() != (out["hot"] / "episodes.jsonl").read_text()
