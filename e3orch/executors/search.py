"""The ``search`` executor: BM25 (``bm25s``) over a local JSONL corpus of passages.

Pool options: ``corpus`` — a JSONL file with one ``{"id", "title", "text"}`` object per line
(relative paths are resolved against the current directory; default: the small corpus shipped
in ``e3orch/data/corpus/wiki_mini.jsonl``); ``top_k`` — passages returned (default 3).

The instruction is the query (dependency outputs are appended to it, so "look up the capital
named in [s1]" can work). The index is built once per executor, on first use, under a lock.
The output lists the hits as ``[n] Title (id): text``; a query that matches nothing is a
failed call ("no passage matches the query"), not an empty success.

What this module deliberately does not do: dense retrieval, web access, stemming or
query rewriting; tokens are lower-cased words with English stop words removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e3orch.executors.base import ExecutionResult, Executor, ExecutorSpec, SubtaskRequest, register_executor
from e3orch.executors.prompting import estimate_tokens

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "wiki_mini.jsonl"
_OPTIONS = {"corpus", "top_k"}
_TOKEN_PATTERN = r"(?u)\b\w+\b"  # keep one-character tokens: digits and initials matter in facts


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


def load_corpus(path: str | Path) -> list[Passage]:
    """Passages from a JSONL file; every line must have string ``id`` and ``text`` (``title`` optional)."""
    p = Path(path)
    passages: list[Passage] = []
    seen: set[str] = set()
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{lineno}: not valid JSON: {exc.msg}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or "id" not in obj:
                raise ValueError(f"{p}:{lineno}: each line needs an 'id' and a string 'text' (and a 'title')")
            pid = str(obj["id"])
            if pid in seen:
                raise ValueError(f"{p}:{lineno}: duplicate passage id {pid!r}")
            seen.add(pid)
            passages.append(Passage(pid, str(obj.get("title") or ""), obj["text"]))
    if not passages:
        raise ValueError(f"{p}: the corpus is empty")
    return passages


class BM25Index:
    """A BM25 index over passages (title + text), queried by free text."""

    def __init__(self, passages: list[Passage]) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        # bm25s sets its own logger to DEBUG, which would print on any root handler.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.passages = passages
        self.tokenizer = Tokenizer(splitter=_TOKEN_PATTERN, stopwords="en")
        docs = [f"{p.title}\n{p.text}" for p in passages]
        tokens = self.tokenizer.tokenize(docs, return_as="ids", show_progress=False)
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, top_k: int) -> list[Hit]:
        ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
        if not ids or not ids[0]:
            return []  # no query word occurs in the corpus
        k = min(top_k, len(self.passages))
        docs, scores = self.retriever.retrieve(ids, k=k, show_progress=False, n_threads=1)
        return [
            Hit(self.passages[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True) if float(s) > 0.0
        ]


def format_hits(hits: list[Hit]) -> str:
    return "\n".join(f"[{i}] {h.passage.title} ({h.passage.id}): {h.passage.text}" for i, h in enumerate(hits, 1))


@register_executor("search")
class SearchExecutor(Executor):
    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        opts: dict[str, Any] = spec.options
        unknown = set(opts) - _OPTIONS
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for kind search; known: {sorted(_OPTIONS)}")
        self.corpus_path = Path(opts["corpus"]).expanduser().resolve() if opts.get("corpus") else DEFAULT_CORPUS
        if not self.corpus_path.is_file():
            raise ValueError(f"search corpus not found: {self.corpus_path} (option 'corpus': a JSONL file)")
        self.top_k = int(opts.get("top_k", 3))
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        self._index: BM25Index | None = None
        self._lock = threading.Lock()

    def index(self) -> BM25Index:
        """The index, built on first use (once, even when called from several threads)."""
        with self._lock:
            if self._index is None:
                t0 = time.perf_counter()
                self._index = BM25Index(load_corpus(self.corpus_path))
                log.info(
                    "search %s: indexed %d passages from %s in %.2fs",
                    self.name, len(self._index.passages), self.corpus_path, time.perf_counter() - t0,
                )
            return self._index

    def _search(self, query: str) -> list[Hit]:
        return self.index().search(query, self.top_k)

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        t0 = time.perf_counter()
        query = " ".join([request.instruction, *(out for _id, out in request.context)])
        n_in = estimate_tokens(query)
        try:
            hits = await asyncio.to_thread(self._search, query)
        except (OSError, ValueError) as exc:  # unreadable or malformed corpus
            return self.failure(request, f"search: {exc}", time.perf_counter() - t0)
        latency = time.perf_counter() - t0
        if not hits:
            return self.failure(request, "no passage matches the query", latency, cost=self.spec.cost(n_in, 0))
        output = format_hits(hits)
        return self.success(request, output, input_tokens=n_in, output_tokens=estimate_tokens(output), latency_s=latency)
