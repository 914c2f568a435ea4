"""scripts/confidence_reading.py: a policy's P(yes) to repair a result, and to act on the part that uses it, by confidence."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from conftest import REPO, load_script, write_tiny_params

from e3orch.executors.base import ExecutionResult, load_pool_specs
from e3orch.orchestration.episode import Observation
from e3orch.orchestration.types import MilestoneRecord, Plan, Subtask
from e3orch.policy.prompts import sub_prompts

CHAIN = """A fact verification task.
P1: (simple) Find the main export of Corvo Labs.
P2: (moderate) Find the largest customer of that export, using P1.
P3: (moderate) Find the headquarters of that customer, using P2.
Final answer: the result of P3."""


def _script():  # type: ignore[no-untyped-def]
    return load_script("confidence_reading")


@pytest.mark.parametrize("style", ["per_part", "per_part_tiers", "per_part_tier_answers"])
@pytest.mark.parametrize("confidence", [0.41, 0.58, 0.61, 0.9])
def test_the_questions_are_those_the_policy_is_asked_in_that_state(confidence: float, style: str) -> None:
    """P1 confirmed at 0.98, P2's one attempt at ``confidence``: the prompt code asks exactly the
    script's two questions (and one about P1)."""
    record = MilestoneRecord(
        "Solve P1, P2", Plan((Subtask("S1", "web-search", "Solve P1."), Subtask("S2", "web-search", "Solve P2."))),
        [ExecutionResult("S1", "web-search", True, "P1 = Norvik52 (confidence 0.98)"),
         ExecutionResult("S2", "web-search", True, f"P2 = Velola25 (confidence {confidence})")])
    obs = Observation(task_id="t", question=CHAIN, cards=tuple(load_pool_specs(REPO / "configs/executors/default.yaml")),
                      history=(record,), pending_milestone=None, milestones_left=10, subtasks_left=30, cost_left=50.0,
                      max_plan_subtasks=8)
    script = _script()
    assert style in script.STYLES
    asked = sub_prompts(obs, "milestone", style) or []  # type: ignore[arg-type]
    mine = script.questions("retrieve", "normal", confidence)
    assert asked[1:] == [mine["repair P2"], mine["act on P3"]]
    # the styles left out ask them otherwise (or not one part at a time)
    for other in ("per_part_bands", "per_part_source", "per_part_menu", "factored"):
        assert (sub_prompts(obs, "milestone", other) or [])[1:] != asked[1:]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh (untrained) default policy made by init-policy: (params, policy)."""
    from e3orch.cli import main

    root = tmp_path_factory.mktemp("confidence")
    params = write_tiny_params(root, policy={"prompt": "per_part_tiers"})
    assert main(["prepare", "--params", str(params)]) == 0
    assert main(["init-policy", "--params", str(params), "--out", str(root / "init")]) == 0
    return params, root / "init"


def test_each_cell_is_the_probability_of_yes(policy: tuple[Path, Path]) -> None:
    from e3orch.config import load_params
    from e3orch.policy.backends.base import backend_from_params

    params, path = policy
    script = _script()
    backend = backend_from_params(load_params(params).policy, path)
    rows = script.yes_probabilities(backend, "code", "hard")
    assert list(rows) == ["repair P2", "act on P3"]
    for row, ps in rows.items():
        qs = [script.questions("code", "hard", c)[row] for c in script.CONFIDENCES]
        assert ps == pytest.approx([math.exp(sum(lp)) for lp in backend.score(qs, ["yes"] * len(qs))], rel=1e-6, abs=0)


def test_it_prints_two_rows_per_policy_and_refuses_bad_input(policy: tuple[Path, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    params, path = policy
    script = _script()
    assert script.main([str(path), "--params", str(params)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "P(yes), a normal retrieve part; confidence 0.30 0.40 0.50 0.55 0.58 0.61 0.65 0.70 0.80 0.90"
    assert [re.fullmatch(rf"{re.escape(str(path))}: (repair P2|act on P3) ((?:[01]\.\d\d ?){{10}})", line) is not None
            for line in out[1:]] == [True, True]
    assert script.main([str(path), "--params", str(params), "--skill", "cooking"]) == 2
    assert capsys.readouterr().err.strip() == "confidence_reading: --skill 'cooking': one of retrieve, compute, code, reason"
    assert script.main([str(tmp_path), "--params", str(params)]) == 2
    assert capsys.readouterr().err.strip() == f"confidence_reading: {tmp_path}: not a policy checkpoint (no config.json)"
