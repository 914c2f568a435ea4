"""Live benchmarks: loaders, splits and graders on hand-built cases with exact expected values."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from e3orch.data import live
from e3orch.data.graders import get_grader
from e3orch.data.tasks import LIVE_SPLITS, Task, tasks_to_frame

# --------------------------------------------------------------------------- helpers


def _task(benchmark: str, answer: str, question: str = "q", **meta: object) -> Task:
    return Task(task_id=f"{benchmark}/t", split="eval", domain=benchmark, benchmark=benchmark,
                question=question, answer=answer, meta=dict(meta))


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def humaneval() -> dict[str, Task]:
    return {t.task_id: t for t in live.load_benchmark("humaneval")}


# --------------------------------------------------------------------------- loading and splits


def test_humaneval_loads_from_the_installed_package(humaneval: dict[str, Task]) -> None:
    assert len(humaneval) == 164
    t = humaneval["HumanEval/0"]
    assert t.benchmark == t.domain == "humaneval"
    assert t.requirements == ()
    assert t.question.startswith("from typing import List")
    assert t.meta["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in t.meta["test"]
    assert t.meta["canonical_solution"] == t.answer
    assert {t.split for t in humaneval.values()} == set(LIVE_SPLITS)
    tasks_to_frame(humaneval.values())  # the pandera schema accepts them


def test_split_is_a_pure_function_of_task_id() -> None:
    assert live.assign_split("HumanEval/0") == live.assign_split("HumanEval/0")
    assert live.assign_split("x", eval_fraction=0.0) == "train"
    assert live.assign_split("x", eval_fraction=1.0) == "eval"
    ids = [f"gsm8k/{i}" for i in range(2000)]
    share = sum(live.assign_split(i) == "eval" for i in ids) / len(ids)
    assert 0.45 < share < 0.55
    with pytest.raises(ValueError, match="eval_fraction"):
        live.assign_split("x", eval_fraction=1.5)


def test_split_and_limit_filter(humaneval: dict[str, Task]) -> None:
    evals = live.load_benchmark("humaneval", split="eval")
    assert evals and all(t.split == "eval" for t in evals)
    assert len(evals) == sum(t.split == "eval" for t in humaneval.values())
    assert len(live.load_benchmark("humaneval", limit=5)) == 5


def test_gsm8k_from_jsonl(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "Tom has 3 apples and buys 1,000 more. How many?", "answer": "3 + 1000 = 1003\n#### 1,003"},
        {"question": "Half of 9?", "answer": "9/2 = 4.5\n#### 4.5"},
    ])
    tasks = live.load_benchmark("gsm8k", p)
    assert [t.task_id for t in tasks] == ["gsm8k/0", "gsm8k/1"]
    assert [t.answer for t in tasks] == ["1003", "4.5"]
    assert tasks[0].meta["solution"].endswith("#### 1,003")
    assert all(t.split in LIVE_SPLITS and t.benchmark == "gsm8k" for t in tasks)


def test_mbpp_math_hotpotqa_from_parquet_and_json(tmp_path: Path) -> None:
    mbpp = tmp_path / "mbpp.parquet"
    pl.DataFrame([{"task_id": 11, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
                   "test_list": ["assert add(1, 2) == 3"], "test_setup_code": ""}]).write_parquet(mbpp)
    (t,) = live.load_benchmark("mbpp", mbpp)
    assert t.task_id == "mbpp/11" and t.meta["source_id"] == "11"
    assert "assert add(1, 2) == 3" in t.question

    math = _write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "What is 1/2 + 1/4?", "solution": "We get $\\boxed{\\frac{3}{4}}$.", "level": "Level 1"},
        {"problem": "2+2?", "solution": "...", "answer": "4", "unique_id": "test/algebra/1.json"},
    ])
    a, b = live.load_benchmark("math", math)
    assert (a.task_id, a.answer) == ("math/0", "\\frac{3}{4}")
    assert (b.task_id, b.answer) == ("math/test/algebra/1.json", "4")

    hotpot = tmp_path / "hotpot_dev.json"  # the original file is one JSON array
    hotpot.write_text(json.dumps([{
        "_id": "5a8b", "question": "Which city is the Eiffel Tower in?", "answer": "Paris", "type": "bridge",
        "context": [["Eiffel Tower", ["The Eiffel Tower ", "is in Paris."]], ["Paris", ["Paris is in France."]]],
    }]))
    (h,) = live.load_benchmark("hotpotqa", hotpot)
    assert h.task_id == "hotpotqa/5a8b" and h.answer == "Paris"
    assert h.meta["context"][0] == ["Eiffel Tower", "The Eiffel Tower is in Paris."]
    assert live.hotpotqa_corpus([h])[1] == {"title": "Paris", "text": "Paris is in France."}


def test_missing_data_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(live.DATA_DIR_ENV, str(tmp_path))  # an empty data dir
    with pytest.raises(FileNotFoundError) as exc:
        live.load_benchmark("gsm8k")
    msg = str(exc.value)
    assert "\n" not in msg and "--data PATH" in msg and "question, answer" in msg

    with pytest.raises(FileNotFoundError) as exc2:
        live.load_benchmark("hotpotqa", tmp_path / "nope.jsonl")
    assert "nope.jsonl" in str(exc2.value) and "\n" not in str(exc2.value)


def test_default_data_dir_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "1+1?", "answer": "#### 2"}])
    monkeypatch.setenv(live.DATA_DIR_ENV, str(tmp_path))
    assert [t.answer for t in live.load_benchmark("gsm8k")] == ["2"]


def test_hub_id_without_datasets_is_a_one_line_error() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("`datasets` is installed: the hub path would try the network")
    with pytest.raises(ValueError) as exc:
        live.load_benchmark("gsm8k", "openai/gsm8k")
    assert "datasets" in str(exc.value) and "\n" not in str(exc.value)


def test_bad_records_name_the_missing_field(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "g.jsonl", [{"question": "no answer here"}])
    with pytest.raises(ValueError, match="lacks field 'answer'"):
        live.load_benchmark("gsm8k", p)
    with pytest.raises(ValueError, match="unknown live benchmark"):
        live.load_benchmark("nope")


# --------------------------------------------------------------------------- numeric normalisation


@pytest.mark.parametrize(
    ("raw", "normalised", "number"),
    [
        ("$1,234", "1234", 1234),
        ("\\$18.00", "18", 18),
        ("1234.0", "1234", 1234),
        ("2.50", "2.5", 2.5),
        ("\\boxed{1234}", "1234", 1234),
        ("\\frac{1}{2}", "\\frac{1}{2}", 0.5),
        ("\\dfrac{3}{4}", "\\frac{3}{4}", 0.75),
        ("\\frac12", "\\frac{1}{2}", 0.5),
        ("-\\frac{1}{2}", "-\\frac{1}{2}", -0.5),
        ("1/2", "\\frac{1}{2}", 0.5),
        ("50\\%", "50", 50),
        ("5^\\circ", "5", 5),
        ("5 \\text{ cm}", "5", 5),
        ("x = 5", "5", 5),
        (".5", "0.5", 0.5),
        ("+5", "5", 5),
        ("10,000,000", "10000000", 10_000_000),
        ("18 dollars", "18dollars", 18),  # units: the number is fished out by parse_number
        ("1,2", "1,2", 1),  # not a thousands separator: kept as written
        ("\\text{Tuesday}", "Tuesday", None),
    ],
)
def test_normalisation_table(raw: str, normalised: str, number: float | None) -> None:
    assert live.normalize_math(raw) == normalised
    value = live.parse_number(raw)
    assert (None if value is None else float(value)) == number


@pytest.mark.parametrize(
    ("text", "final"),
    [
        ("She pays 5 + 3 = 8 dollars.\n#### 8", "8"),
        ("First 2, then \\boxed{\\frac{1}{2}}; done at 7", "\\frac{1}{2}"),
        ("So the answer is $18.", "$18"),
        ("Answer: 42", "42"),
        ("I think 12, then 14 cookies", "14"),
        ("no digits", "no digits"),
    ],
)
def test_extract_final_answer(text: str, final: str) -> None:
    assert live.extract_final_answer(text) == final


@pytest.mark.parametrize(
    ("answer", "correct", "error"),
    [
        ("#### 1003", True, None),
        ("The total is 1,003 apples.", True, None),
        ("So the answer is $1003.00.", True, None),
        ("\\boxed{1003}", True, None),
        ("1002", False, None),
        ("I don't know", False, "no number in the answer: \"I don't know\""),
    ],
)
def test_gsm8k_grader(answer: str, correct: bool, error: str | None) -> None:
    g = get_grader("gsm8k")(_task("gsm8k", "1003"), answer)
    assert (g.correct, g.score, g.error) == (correct, 1.0 if correct else 0.0, error)


@pytest.mark.parametrize(
    ("answer", "reference", "correct"),
    [
        ("The answer is \\boxed{\\dfrac{3}{4}}.", "\\frac{3}{4}", True),
        ("\\boxed{0.75}", "\\frac{3}{4}", True),
        ("\\boxed{3/4}", "\\frac34", True),
        ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)", True),
        ("\\boxed{x = 7}", "7", True),
        ("\\boxed{10\\%}", "10", True),
        ("\\boxed{\\sqrt{2}}", "\\sqrt2", False),  # no symbolic algebra: only normalised forms match
        ("\\boxed{2x+3}", "2", False),  # numbers are never fished out of expressions
        ("\\boxed{5}", "6", False),
    ],
)
def test_math_grader(answer: str, reference: str, correct: bool) -> None:
    g = get_grader("math")(_task("math", reference), answer)
    assert (g.correct, g.score) == (correct, 1.0 if correct else 0.0)


# --------------------------------------------------------------------------- HotpotQA (official EM/F1)


@pytest.mark.parametrize(
    ("pred", "gold", "em", "f1"),
    [
        ("Paris", "Paris", True, 1.0),
        ("paris, France.", "Paris France", True, 1.0),
        ("the Eiffel Tower", "Eiffel Tower in Paris", False, 2 * 1.0 * 0.5 / 1.5),
        ("Barack Obama was born in Hawaii", "Hawaii", False, 2 / 7),  # P = 1/6, R = 1
        ("yes", "no", False, 0.0),
        ("yes it is", "yes", False, 0.0),  # the gold is yes/no: the prediction must be exactly it
        ("no", "no", True, 1.0),
        ("London", "Paris", False, 0.0),
        ("After thinking, the answer is Paris.", "Paris", True, 1.0),
    ],
)
def test_hotpotqa_grader(pred: str, gold: str, em: bool, f1: float) -> None:
    g = get_grader("hotpotqa")(_task("hotpotqa", gold), pred)
    assert g.correct is em
    assert g.score == pytest.approx(f1, abs=1e-12)
    assert g.error is None


def test_hotpotqa_yes_no_rule_matches_the_official_script() -> None:
    # Official: a yes/no/noanswer on either side must match exactly, else F1 = 0.
    assert live.f1_score("yes it is", "yes") == (0.0, 0.0, 0.0)
    assert live.f1_score("no", "yes") == (0.0, 0.0, 0.0)
    assert live.f1_score("noanswer", "Paris") == (0.0, 0.0, 0.0)
    assert live.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"


# --------------------------------------------------------------------------- code graders (real sandbox)


def test_all_164_canonical_humaneval_solutions_pass(humaneval: dict[str, Task]) -> None:
    lines = [live.AnswerLine(i, tid, t.meta["canonical_solution"]) for i, (tid, t) in enumerate(humaneval.items())]
    results = live.grade_answers("humaneval", lines, humaneval, workers=4)
    failed = [(r.task_id, r.grade.error) for r in results if not r.grade.correct]
    assert failed == []
    assert len(results) == 164


BROKEN = [
    ("    return True\n", "exit code 1: AssertionError"),            # wrong result
    ("    for i in range(:\n", "SyntaxError"),                         # syntax error
    ("    while True:\n        pass\n", "timeout after 2s"),           # infinite loop
    ("    raise RuntimeError('boom')\n", "RuntimeError: boom"),
    ("    import os\n    os._exit(0)\n", "exited with status 0 before the tests finished"),
    ("    import sys\n    sys.exit(0)\n", "exited with status 0 before the tests finished"),
    ("    print('x' * 10**6)\n    return True\n", "output truncated"),
]


@pytest.mark.parametrize(("completion", "why"), BROKEN)
def test_broken_humaneval_completions_fail(humaneval: dict[str, Task], completion: str, why: str) -> None:
    g = live.grade_humaneval(humaneval["HumanEval/0"], completion, timeout_s=2)
    assert g.correct is False and g.score == 0.0
    assert why in (g.error or "")


def test_full_definitions_and_fenced_code_are_accepted(humaneval: dict[str, Task]) -> None:
    t = humaneval["HumanEval/0"]
    body = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for j, b in enumerate(numbers) if i != j)\n"
    full = "def has_close_elements(numbers, threshold):\n" + body
    fenced = "Here you go:\n```python\n" + full + "```\nIt compares all pairs."
    for answer in (body, full, fenced, t.question + body):
        g = live.grade_humaneval(t, answer)
        assert (g.correct, g.error) == (True, None), answer
    wrong_full = "def has_close_elements(numbers, threshold):\n    return False\n"
    assert live.grade_humaneval(t, wrong_full).correct is False


def test_full_definition_keeps_the_prompts_helpers(humaneval: dict[str, Task]) -> None:
    # HumanEval/10's prompt defines a helper (is_palindrome) the solution may call.
    t = humaneval["HumanEval/10"]
    assert "def is_palindrome" in t.question
    full = "def make_palindrome(string: str) -> str:\n" + t.meta["canonical_solution"]
    assert live.grade_humaneval(t, full).correct is True


def test_humaneval_program_forms(humaneval: dict[str, Task]) -> None:
    t = humaneval["HumanEval/0"]
    completion = t.meta["canonical_solution"]
    assert live.humaneval_program(t, completion) == (
        t.question + completion + "\n\n" + t.meta["test"] + "\ncheck(has_close_elements)\n"
    )
    assert live.defines_function("def has_close_elements(x):\n", "has_close_elements")
    assert not live.defines_function("    def has_close_elements(x):\n", "has_close_elements")
    assert not live.defines_function("def has_close_elements_2(x):\n", "has_close_elements")


def test_mbpp_grader() -> None:
    t = _task("mbpp", "", tests=None, test_list=["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], test_setup_code="")
    assert live.grade_mbpp(t, "def add(a, b):\n    return a + b\n").correct is True
    assert live.grade_mbpp(t, "```python\ndef add(a, b):\n    return a + b\n```").correct is True
    bad = live.grade_mbpp(t, "def add(a, b):\n    return a - b\n")
    assert (bad.correct, bad.error) == (False, "exit code 1: AssertionError")


def test_grade_answers_reports_bad_lines_per_line(humaneval: dict[str, Task], tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_text('{"task_id": "HumanEval/999", "answer": "x"}\nnot json\n{"task_id": "HumanEval/1"}\n{"task_id": 7, "answer": 3}\n')
    lines = live.read_answer_lines(p)
    assert [(al.line, al.task_id) for al in lines] == [(1, "HumanEval/999"), (2, None), (3, "HumanEval/1"), (4, "7")]
    results = live.grade_answers("humaneval", lines, humaneval)
    assert [r.graded for r in results] == [False, False, False, False]
    assert results[0].grade.error == "unknown task_id 'HumanEval/999' for benchmark humaneval"
    assert results[1].grade.error == "line 2: not valid JSON (Expecting value)"
    assert results[2].grade.error == "line 3: needs an 'answer' field"


def test_task_index_accepts_the_data_sets_own_ids(tmp_path: Path) -> None:
    p = tmp_path / "mbpp.jsonl"
    _write_jsonl(p, [{"task_id": 11, "text": "add", "code": "", "test_list": ["assert add(1, 2) == 3"]}])
    index = live.task_index(live.load_benchmark("mbpp", p))
    assert index["11"] is index["mbpp/11"]
