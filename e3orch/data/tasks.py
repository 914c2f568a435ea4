"""Task records and their pandera (polars) schema.

A :class:`Task` is what every environment hands the engine: the question text the orchestrator
reads, the reference answer the grader uses, and — for the ``sim`` environment only — the hidden
requirement graph that drives the simulated executors. Orchestrators and policies never read
``requirements``; only executors of kind ``simulated`` and the sim grader do.
"""

from __future__ import annotations

import json
import re
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


def schema_problems(exc: Exception, most: int = 4) -> str:
    """A pandera ``SchemaErrors`` in one line: each failed check and its column."""
    def say(e: dict[str, Any]) -> str:
        check, column, error = e.get("check", "?"), e.get("column", "?"), str(e.get("error", ""))
        if check == "column_in_dataframe":
            return f"no column {column!r}"
        if check == "column_in_schema":
            m = re.match(r"column '([^']*)' not in", error)
            return f"unexpected column {m.group(1)!r}" if m else "unexpected column"
        if check == "field_uniqueness":
            return f"{column!r} not unique"
        if check == "dtype":
            return f"column {column!r} has the wrong type ({error.splitlines()[0][:80]})"
        return f"{column!r} fails {check}"

    found = [say(e) for kind in getattr(exc, "message", {}).values() for errors in kind.values() for e in errors]
    if not found:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    more = f"; {len(found) - most} more" if len(found) > most else ""
    return "; ".join(found[:most]) + more


def read_table(path: str | Path, schema: Any, what: str, missing_hint: str = "") -> pl.DataFrame:
    """A Parquet table checked against its pandera ``schema``; a missing, unreadable or
    off-schema file is one ``ValueError``/``FileNotFoundError`` line naming ``path`` and ``what``."""
    from pandera.errors import SchemaError, SchemaErrors

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{what} not found: {p}{missing_hint}")
    if p.is_dir():
        raise ValueError(f"{p}: is a folder, not a {what}")
    try:
        df = pl.read_parquet(p)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(f"{p}: not a readable {what} ({str(exc).splitlines()[0]})") from None
    try:
        return schema.validate(df, lazy=True)
    except (SchemaErrors, SchemaError) as exc:
        raise ValueError(f"{p}: not a valid {what}: {schema_problems(exc)}") from None


def read_tasks(path: str | Path) -> list[Task]:
    return frame_to_tasks(read_table(path, TaskSchema, "task table", " (run `e3orch prepare` first)"))
