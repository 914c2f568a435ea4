"""scripts/plan_reading.py: a fresh policy taught the plan-slot questions alone, probed as it learns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import load_script, write_tiny_params


def _script():  # type: ignore[no-untyped-def]
    return load_script("plan_reading")


@pytest.fixture(scope="module")
def tiny_tiers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from e3orch.cli import main

    params = write_tiny_params(tmp_path_factory.mktemp("plan-reading"), policy={"prompt": "per_part_tiers"})
    assert main(["prepare", "--params", str(params)]) == 0
    return params


def test_it_probes_every_skill_note_and_difficulty_as_it_trains(tiny_tiers: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["--params", str(tiny_tiers), "--epochs", "2", "--every", "1", "--batch-by-question"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step ")]
    assert lines and lines[-1].split()[1].split("/")[0] == lines[-1].split()[1].split("/")[1]  # the last step probed
    cells = re.findall(r"(ret|rea) (x0|x1|P1) ((?:[01]\.\d\d/){2}[01]\.\d\d)", lines[-1])
    assert [(s, n) for s, n, _ in cells] == [(s, n) for s in ("ret", "rea") for n in ("x0", "x1", "P1")]
    assert all(0.0 <= float(p) <= 1.0 for _, _, ps in cells for p in ps.split("/"))


def test_a_teacher_with_no_plan_questions_is_a_one_line_error(tiny_tiers: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["--params", str(tiny_tiers), "--teachers", "nobody"]) == 2
    assert capsys.readouterr().err.strip() == "plan_reading: no plan questions (policy.prompt per_part_tiers, teachers nobody)"


def test_soft_labels_ask_the_same_questions_with_the_mix_of_answers(tiny_tiers: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    counts = []
    for extra in ([], ["--soft-labels"]):
        assert _script().main(["--params", str(tiny_tiers), "--epochs", "0.5", "--every", "1000", *extra]) == 0
        head = capsys.readouterr().out.splitlines()[0]
        m = re.fullmatch(r"(\d+) plan questions \((\d+) distinct question-answer pairs\) from (\d+) demonstrations", head)
        assert m, head
        counts.append(tuple(int(x) for x in m.groups()))
    (questions, pairs, _), (soft_questions, soft_pairs, _) = counts
    # the same questions (their shares sum to one each); every answer any teacher of the mix gives them
    assert soft_questions == questions > 0 and soft_pairs > pairs
