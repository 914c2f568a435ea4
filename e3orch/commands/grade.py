"""``e3orch grade``: grade ``{task_id, answer}`` JSONL lines with a benchmark's grader.

With ``--json`` stdout carries exactly one ``{task_id, correct, score, error}`` object per answer
line, in input order, and nothing else; a one-line summary goes to stderr. Without ``--json`` a
progress bar (stderr) and a table (stdout) are shown instead.

Tasks come from the live loaders (:mod:`e3orch.data.live`; ``--data`` as there) or, for any
benchmark, from a task table written by ``e3orch prepare`` (``--data PATH.parquet``).

What this command deliberately does not do: run executors or orchestrators — it only grades.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from e3orch.commands.common import add_params_arg, live_tasks, params_from
from e3orch.config import Params
from e3orch.data import live
from e3orch.data.graders import get_grader
from e3orch.data.tasks import Task, read_tasks

_TASK_COLUMNS = {"task_id", "split", "domain", "benchmark", "question", "answer", "requirements", "meta"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_arg(parser)
    parser.add_argument("--benchmark", required=True, help="benchmark whose grader to use (humaneval, mbpp, gsm8k, math, hotpotqa, ...)")
    parser.add_argument("--answers", required=True, help="JSONL file, one {\"task_id\": ..., \"answer\": ...} per line")
    parser.add_argument("--data", default=None, help="data file or hub id for the benchmark, or a task table (.parquet) from "
                        "`e3orch prepare` (default: live.sources in the params file)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per answer line on stdout")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), help="answers graded in parallel")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per program for code benchmarks (default 10)")


def _is_task_table(path: str) -> bool:
    if not path.lower().endswith(".parquet"):
        return False
    if not Path(path).is_file():
        raise FileNotFoundError(f"--data {path}: no such file")
    import polars as pl

    try:
        return _TASK_COLUMNS <= set(pl.read_parquet_schema(path))
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"--data {path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None


def load_tasks(benchmark: str, data: str | None, params: Params) -> list[Task]:
    if data is not None and _is_task_table(data):
        tasks = [t for t in read_tasks(data) if t.benchmark.split("/")[0] == benchmark]
        if not tasks:
            raise ValueError(f"{data}: no tasks of benchmark {benchmark!r} in this task table")
        return tasks
    if benchmark in live.BENCHMARKS:
        return live_tasks(params, benchmark, data)
    raise ValueError(f"--benchmark {benchmark} needs --data PATH to a task table (.parquet) written by `e3orch prepare`")


def run(args: argparse.Namespace) -> int:
    get_grader(args.benchmark)  # unknown benchmark: one-line error before any work
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout}")
    params = params_from(args)
    lines = live.read_answer_lines(args.answers)
    tasks = live.task_index(load_tasks(args.benchmark, args.data, params))
    t0 = time.perf_counter()

    if args.json:
        results = live.grade_answers(args.benchmark, lines, tasks, workers=args.workers, timeout_s=args.timeout)
        for r in results:
            sys.stdout.write(json.dumps(r.to_dict()) + "\n")
        sys.stdout.flush()
    else:
        from tqdm import tqdm

        with tqdm(total=len(lines), desc=f"grading {args.benchmark}", unit="answer", file=sys.stderr) as bar:
            results = live.grade_answers(
                args.benchmark, lines, tasks, workers=args.workers, timeout_s=args.timeout,
                on_result=lambda _r: bar.update(1),
            )
        _print_table(results)

    n = len(results)
    n_correct = sum(r.grade.correct for r in results)
    not_graded = sum(1 for r in results if not r.graded)
    mean_score = sum(r.grade.score for r in results) / n
    sys.stderr.write(
        f"{args.benchmark}: {n_correct}/{n} correct ({n_correct / n:.1%}), mean score {mean_score:.3f}, "
        f"{not_graded} not graded (unknown task_id or bad line), {time.perf_counter() - t0:.1f}s\n"
    )
    return 0


def _print_table(results: list[live.AnswerGrade]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("task_id", "correct", "score", "error")
    for r in results:
        err = (r.grade.error or "")[:80]
        table.add_row(str(r.task_id), "yes" if r.grade.correct else "no", f"{r.grade.score:.3f}", err)
    Console().print(table)
