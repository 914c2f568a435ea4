"""The sim task generator, the task table schema and the sim grader."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from statistics import mean

import pandera.errors
import polars as pl
import pytest

from e3orch.data.graders import grade
from e3orch.data.sim import DIFFICULTY_WORDS, DOMAINS, generate_split, generate_task, grade_sim
from e3orch.data.tasks import SPLITS, TaskSchema, read_tasks, tasks_to_frame, write_tasks

SEVEN = {"multihop", "math", "code", "table", "factcheck", "planning", "research"}
SKILLS = {"retrieve", "compute", "code", "reason"}


@pytest.fixture(scope="module")
def train():  # type: ignore[no-untyped-def]
    return generate_split(0, "train", 40)


@pytest.fixture(scope="module")
def evals():  # type: ignore[no-untyped-def]
    return generate_split(0, "eval", 25)


def test_seven_domains(train) -> None:  # type: ignore[no-untyped-def]
    assert set(DOMAINS) == SEVEN
    assert Counter(t.domain for t in train) == {d: 40 for d in SEVEN}
    assert {t.benchmark for t in train} == {f"sim/{d}" for d in SEVEN}
    assert generate_split(0, "eval", 3, ["math", "code"]) == [
        generate_task(0, d, 1_000_000 + i, "eval") for d in ("math", "code") for i in range(3)
    ]


def test_unknown_domain_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown sim domain 'cooking'"):
        generate_task(0, "cooking", 0, "train")
    with pytest.raises(ValueError, match="unknown sim domain"):
        generate_split(0, "train", 1, ["cooking"])


def test_same_seed_identical_different_seed_different(train) -> None:  # type: ignore[no-untyped-def]
    assert generate_split(0, "train", 40) == train
    other = generate_split(1, "train", 40)
    assert [t.task_id for t in other] == [t.task_id for t in train]
    differ = sum(a.question != b.question or a.answer != b.answer for a, b in zip(train, other))
    assert differ == len(train)


def test_train_and_eval_are_disjoint(train, evals) -> None:  # type: ignore[no-untyped-def]
    assert {t.split for t in train} == {"train"} and {t.split for t in evals} == {"eval"}
    assert not {t.task_id for t in train} & {t.task_id for t in evals}
    assert not {t.question for t in train} & {t.question for t in evals}
    assert len({t.task_id for t in train}) == len(train)
    assert len({t.question for t in train}) == len(train)


def test_validation_split_is_disjoint_from_both_and_writes_valid_parquet(train, evals, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    val = generate_split(0, "val", 15)
    assert {t.split for t in val} == {"val"} and len(val) == 105
    for other in (train, evals):
        assert not {t.task_id for t in val} & {t.task_id for t in other}
        assert not {t.question for t in val} & {t.question for t in other}
    assert read_tasks(write_tasks(val, tmp_path / "sim_val.parquet")) == val


def test_question_names_every_part_and_the_final_part(train, evals) -> None:  # type: ignore[no-untyped-def]
    for t in train + evals:
        lines = t.question.splitlines()
        n = len(t.requirements)
        assert [r.id for r in t.requirements] == [f"P{i}" for i in range(1, n + 1)]
        part_lines = [ln for ln in lines if re.match(r"^P\d+: ", ln)]
        assert [ln.split(":")[0] for ln in part_lines] == [f"P{i}" for i in range(1, n + 1)]
        assert lines[-1] == f"Final answer: the result of P{n}."
        assert t.sinks == (f"P{n}",)
        assert t.answer == t.requirements[-1].value
        for ln, r in zip(part_lines, t.requirements):
            # the difficulty cue and the dependencies are readable in the text
            assert ln.split(": (", 1)[1].split(")")[0] in DIFFICULTY_WORDS[r.difficulty]
            named = re.findall(r"\bP\d+\b", ln.split("using", 1)[1]) if "using" in ln else []
            assert tuple(named) == r.deps


def test_requirement_graphs_are_well_formed(train) -> None:  # type: ignore[no-untyped-def]
    for t in train:
        seen: set[str] = set()
        for r in t.requirements:
            assert r.skill in SKILLS and r.difficulty in (0, 1, 2) and r.value
            assert set(r.deps) <= seen  # deps point backwards: acyclic by construction
            seen.add(r.id)


def test_domains_differ_in_shape(train) -> None:  # type: ignore[no-untyped-def]
    by = {d: [t for t in train if t.domain == d] for d in SEVEN}

    def fan_in(d: str) -> int:
        return max(len(r.deps) for t in by[d] for r in t.requirements)

    def n_parts(d: str) -> float:
        return mean(len(t.requirements) for t in by[d])

    def skills(d: str) -> frozenset[str]:
        return frozenset(r.skill for t in by[d] for r in t.requirements)

    # chains
    for d in ("multihop", "math", "code"):
        assert fan_in(d) == 1
    assert {t.requirements[-1].skill for t in by["multihop"]} == {"reason"}
    assert {t.requirements[0].skill for t in by["math"]} == {"reason"}
    # fans and diamonds
    assert fan_in("planning") == 2
    assert all(t.requirements[3].deps == ("P2", "P3") for t in by["planning"])
    assert fan_in("table") >= 3 and fan_in("factcheck") >= 4 and fan_in("research") >= 5
    assert n_parts("research") > n_parts("table") > n_parts("factcheck") > n_parts("multihop")
    # each domain its own signature
    signatures = {d: (fan_in(d), skills(d), round(n_parts(d), 2)) for d in SEVEN}
    assert len(set(signatures.values())) == 7
    assert skills("planning") == frozenset(SKILLS)
    # and its own difficulty mix: planning is harder than math
    hard = {d: mean(r.difficulty for t in by[d] for r in t.requirements) for d in SEVEN}
    assert hard["planning"] > hard["math"] + 0.3


# -- table schema and IO ----------------------------------------------------------------------


def test_parquet_round_trip_is_validated(tmp_path: Path, evals) -> None:  # type: ignore[no-untyped-def]
    path = write_tasks(evals, tmp_path / "sub" / "sim_eval.parquet")
    assert path.exists()
    df = pl.read_parquet(path)
    TaskSchema.validate(df)
    assert df.columns == ["task_id", "split", "domain", "benchmark", "question", "answer", "requirements", "meta"]
    assert read_tasks(path) == evals


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda df: df.with_columns(pl.lit("test").alias("split")), id="bad-split"),
        pytest.param(lambda df: pl.concat([df, df.head(1)]), id="duplicate-task-id"),
        pytest.param(lambda df: df.with_columns(pl.lit("").alias("question")), id="empty-question"),
        pytest.param(lambda df: df.drop("answer"), id="missing-column"),
        pytest.param(lambda df: df.with_columns(pl.lit(1).alias("extra")), id="extra-column"),
        pytest.param(lambda df: df.with_columns(pl.lit(3).alias("answer")), id="wrong-dtype"),
    ],
)
def test_corrupted_frames_fail_validation(tmp_path: Path, evals, corrupt) -> None:  # type: ignore[no-untyped-def]
    good = tasks_to_frame(evals[:5])
    bad = corrupt(good)
    with pytest.raises((pandera.errors.SchemaError, pandera.errors.SchemaErrors)):
        TaskSchema.validate(bad, lazy=True)
    path = tmp_path / "bad.parquet"
    bad.write_parquet(path)
    with pytest.raises(ValueError, match=rf"^{path}: not a valid task table: \S") as info:  # one line naming the file
        read_tasks(path)
    assert "\n" not in str(info.value)


def test_splits_constant_and_missing_file(tmp_path: Path) -> None:
    assert SPLITS == ("train", "eval", "val")
    with pytest.raises(FileNotFoundError, match="e3orch prepare"):
        read_tasks(tmp_path / "nope.parquet")


# -- grader -----------------------------------------------------------------------------------


def test_grader_exact_match_after_normalisation(evals) -> None:  # type: ignore[no-untyped-def]
    t = evals[0]
    assert grade_sim(t, t.answer).correct
    assert grade_sim(t, t.answer).score == 1.0
    for variant in (f"  {t.answer.upper()}. ", t.answer.lower() + ".", f"\n{t.answer}\n"):
        assert grade_sim(t, variant).correct
    g = grade_sim(t, t.answer + "0")
    assert (g.correct, g.score, g.error) == (False, 0.0, None)
    assert not grade_sim(t, f"The answer is {t.answer}").correct  # exact match, not containment
    g = grade_sim(t, "   ")
    assert (g.correct, g.score, g.error) == (False, 0.0, "empty answer")
    assert grade(t, t.answer).correct  # the registry routes sim/<domain> to the sim grader
