"""The micro-batcher: requests that arrive while the backend is generating go out together in the
next call, and every request gets its own completion back."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Sequence

from e3orch.policy.backends.base import Generation, PolicyBackend
from e3orch.policy.orchestrator import DecodeSettings, MicroBatcher


class SlowEcho(PolicyBackend):
    """Answers each prompt with its own text after a fixed, blocking delay (as a real model holds
    its thread), one call at a time; records every call's batch size."""

    name = "slow-echo"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.sizes: list[int] = []
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[str], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 64, seed: int | None = None, min_new_tokens: int = 0,
                 row_seeds: Sequence[int] | None = None) -> list[list[Generation]]:
        with self._lock:
            self.sizes.append(len(prompts))
            time.sleep(self.delay_s)
            return [[Generation(text=f"re: {p}")] for p in prompts]

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_requests_queued_during_a_generation_share_the_next_call() -> None:
    episodes, decisions = 48, 5
    backend = SlowEcho(delay_s=0.05)
    batcher = MicroBatcher(backend, DecodeSettings())

    async def episode(i: int) -> list[str]:
        rng = random.Random(i)
        out = []
        for d in range(decisions):
            for _ in range(rng.randrange(12)):  # episodes reach their next decision at different times
                await asyncio.sleep(0)
            out.append((await batcher.generate(f"ep{i} d{d}", "plan")).text)
        return out

    async def run() -> list[list[str]]:
        return list(await asyncio.gather(*(episode(i) for i in range(episodes))))

    results = asyncio.run(run())
    assert results == [[f"re: ep{i} d{d}" for d in range(decisions)] for i in range(episodes)]
    assert sum(backend.sizes) == episodes * decisions
    # Every request that arrives while a call runs waits for the next one: a few calls per
    # decision step, not one per handful of episodes (10 calls here; the old flush, which took
    # its batch before the backend was free, made about 100).
    assert len(backend.sizes) <= 3 * decisions, backend.sizes


def test_a_batcher_outlives_its_event_loop() -> None:
    backend = SlowEcho(delay_s=0.0)
    batcher = MicroBatcher(backend, DecodeSettings())
    for run in range(2):  # each asyncio.run has its own loop; the batcher's lock follows it
        got = asyncio.run(batcher.generate(f"run {run}", "milestone"))
        assert got.text == f"re: run {run}"
    assert backend.sizes == [1, 1]
