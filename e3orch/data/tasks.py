"""Task records and their pandera (polars) schema.

A :class:`Task` is what every environment hands the engine: the question text the orchestrator
reads, the reference answer the grader uses, and — for the ``sim`` environment only — the hidden
requirement graph that drives the simulated executors. Orchestrators and policies never read
``requirements``; only executors of kind ``simulated`` and the sim grader do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandera.polars as pa
import polars as pl

LIVE_SPLITS = ("train", "eval")  # live tasks are hashed into these
SPLITS = (*LIVE_SPLITS, "val")  # val: sim only (prepare.val_per_domain), RL's round selection


@dataclass(frozen=True)
class Requirement:
    """One hidden part of a sim task: needs ``skill``; its inputs are the values of ``deps``."""

    id: str
    skill: str
    difficulty: int  # 0 easy, 1 medium, 2 hard
    deps: tuple[str, ...] = ()
    value: str = ""  # the correct value this part produces


@dataclass(frozen=True)
class Task:
    task_id: str
    split: str
    domain: str
    benchmark: str
    question: str
    answer: str
    requirements: tuple[Requirement, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def requirement(self, rid: str) -> Requirement | None:
        for r in self.requirements:
            if r.id == rid:
                return r
        return None

    @property
    def sinks(self) -> tuple[str, ...]:
        used = {d for r in self.requirements for d in r.deps}
        return tuple(r.id for r in self.requirements if r.id not in used)

    def to_row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "split": self.split,
            "domain": self.domain,
            "benchmark": self.benchmark,
            "question": self.question,
            "answer": self.answer,
            "requirements": json.dumps([asdict(r) for r in self.requirements]),
            "meta": json.dumps(self.meta, sort_keys=True),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        reqs = tuple(
            Requirement(id=r["id"], skill=r["skill"], difficulty=int(r["difficulty"]), deps=tuple(r["deps"]), value=r["value"])
            for r in json.loads(row.get("requirements") or "[]")
        )
        return cls(
            task_id=row["task_id"],
            split=row["split"],
            domain=row["domain"],
            benchmark=row["benchmark"],
            question=row["question"],
            answer=row["answer"],
            requirements=reqs,
            meta=json.loads(row.get("meta") or "{}"),
        )


class TaskSchema(pa.DataFrameModel):
    """The contract of every task table written under data/."""

    task_id: str = pa.Field(unique=True, str_length={"min_value": 1})
    split: str = pa.Field(isin=list(SPLITS))
    domain: str = pa.Field(str_length={"min_value": 1})
    benchmark: str = pa.Field(str_length={"min_value": 1})
    question: str = pa.Field(str_length={"min_value": 1})
    answer: str
    requirements: str
    meta: str

    class Config:
        strict = True
        coerce = False


def tasks_to_frame(tasks: Iterable[Task]) -> pl.DataFrame:
    rows = [t.to_row() for t in tasks]
    schema = {k: pl.Utf8 for k in ("task_id", "split", "domain", "benchmark", "question", "answer", "requirements", "meta")}
    df = pl.DataFrame(rows, schema=schema)
    return TaskSchema.validate(df, lazy=True)


def frame_to_tasks(df: pl.DataFrame) -> list[Task]:
    return [Task.from_row(r) for r in df.iter_rows(named=True)]


def write_tasks(tasks: Sequence[Task], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tasks_to_frame(tasks).write_parquet(p)
    return p


def read_tasks(path: str | Path) -> list[Task]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"task file not found: {p} (run `e3orch prepare` first)")
    df = pl.read_parquet(p)
    return frame_to_tasks(TaskSchema.validate(df, lazy=True))
