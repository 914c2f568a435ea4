"""The BM25 search executor: the shipped corpus, custom corpora, top_k, misses and the lazy index."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from e3orch.executors import search as search_mod
from e3orch.executors.base import ConfigError, ExecutorSpec, SubtaskRequest, build_pool
from e3orch.executors.search import DEFAULT_CORPUS, SearchExecutor, load_corpus


def _exec(**options: Any) -> SearchExecutor:
    spec = ExecutorSpec.model_validate(
        {"name": "search", "kind": "search", "price": {"input_per_1k": 1.0, "output_per_1k": 1.0}, **options}
    )
    ex = build_pool([spec])["search"]
    assert isinstance(ex, SearchExecutor)
    return ex


def _ask(ex: SearchExecutor, query: str, context: tuple[tuple[str, str], ...] = ()) -> Any:
    return asyncio.run(ex.run(SubtaskRequest("t", "s1", query, context=context)))


def test_shipped_corpus_is_well_formed() -> None:
    passages = load_corpus(DEFAULT_CORPUS)
    assert 100 <= len(passages) <= 300
    assert len({p.id for p in passages}) == len(passages)
    assert all(p.title and len(p.text) > 40 for p in passages)


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("What is the capital of Australia?", "Canberra"),
        ("Who discovered penicillin?", "Penicillin"),
        ("first human in space", "Yuri Gagarin"),
        ("deepest lake in the world", "Lake Baikal"),
        ("Who wrote Don Quixote?", "Don Quixote"),
        ("speed of light metres per second", "Speed of light"),
    ],
)
def test_default_corpus_finds_the_right_passage_first(query: str, title: str) -> None:
    res = _ask(_exec(), query)
    assert res.ok, res.error
    first = res.output.splitlines()[0]
    assert first.startswith(f"[1] {title} (")
    assert len(res.output.splitlines()) == 3  # top_k default
    assert res.cost == pytest.approx((res.input_tokens + res.output_tokens) / 1000)


def test_custom_corpus_relative_path_and_top_k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        {"id": "a", "title": "Alpha", "text": "The zorblax reactor runs on heavy water."},
        {"id": "b", "title": "Beta", "text": "Quokkas live on Rottnest Island."},
        {"id": "c", "title": "Gamma", "text": "The zorblax was invented in 2091."},
    ]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    monkeypatch.chdir(tmp_path)
    ex = _exec(corpus="corpus.jsonl", top_k=5)
    res = _ask(ex, "zorblax")
    assert res.ok
    ids = [line.split("(")[1].split(")")[0] for line in res.output.splitlines()]
    assert sorted(ids) == ["a", "c"]  # only passages that match at all, even with top_k=5


def test_dependency_outputs_join_the_query() -> None:
    res = _ask(_exec(top_k=1), "Tell me more about", context=(("s0", "the platypus"),))
    assert res.ok and res.output.startswith("[1] Platypus (")


def test_no_match_is_a_failed_call() -> None:
    res = _ask(_exec(), "qwxzv blorptang")
    assert not res.ok and res.error == "no passage matches the query"


def test_bad_configs() -> None:
    with pytest.raises(ConfigError, match="corpus not found"):
        _exec(corpus="/nonexistent/corpus.jsonl")
    with pytest.raises(ConfigError, match="top_k"):
        _exec(top_k=0)
    with pytest.raises(ConfigError, match="unknown option"):
        _exec(k=3)


def test_malformed_corpus_is_a_failed_call(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "title": "A", "text": "fine"}\n{not json}\n')
    res = _ask(_exec(corpus=str(bad)), "fine")
    assert not res.ok and "bad.jsonl:2: not valid JSON" in (res.error or "")


def test_index_is_built_once_under_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    real = search_mod.BM25Index

    class CountingIndex(real):  # type: ignore[misc, valid-type]
        def __init__(self, passages: list[search_mod.Passage]) -> None:
            built.append(1)
            super().__init__(passages)

    monkeypatch.setattr(search_mod, "BM25Index", CountingIndex)
    ex = _exec()

    async def many() -> list[Any]:
        return await asyncio.gather(*(ex.run(SubtaskRequest("t", f"s{i}", "capital of Japan")) for i in range(8)))

    results = asyncio.run(many())
    assert len(built) == 1
    assert all(r.ok and r.output.startswith("[1] Tokyo (") for r in results)
