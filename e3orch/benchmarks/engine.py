"""Engine benchmark: scheduler throughput and makespan fidelity, measured in one run.

* ``calls_per_s``: zero-latency simulated executors through :func:`run_plan` (wide and chained
  plans), next to ``bare_asyncio_tasks_per_s``: a minimal asyncio topological runner of no-op
  tasks on the same plans, so the ratio says what the scheduler's bookkeeping costs.
* ``makespan_over_critical_path``: executors that really sleep fixed latencies; wall time of
  wide, deep and diamond plans over their critical path (1.0 is ideal). The worst shape is
  reported, each shape too.

What this module deliberately does not do: assert anything (benchmarks are not tests).
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from typing import Any

from e3orch.executors.base import ExecutorSpec, build_pool
from e3orch.orchestration.scheduler import critical_path, run_plan
from e3orch.orchestration.types import Plan, Subtask


def _pool(sleep: bool, latency_s: float = 0.0):  # type: ignore[no-untyped-def]
    spec = ExecutorSpec.model_validate({
        "name": "bench", "kind": "simulated", "skills": {"reason": 1.0},
        "latency": {"base_s": latency_s, "per_1k_tokens_s": 0.0},
        "latency_noise": 0.0, "sleep_scale": 1.0 if sleep else 0.0,
    })
    return build_pool([spec])


def wide(n: int) -> Plan:
    return Plan(tuple(Subtask(f"S{i}", "bench", "x") for i in range(n)))


def deep(n: int) -> Plan:
    return Plan(tuple(Subtask(f"S{i}", "bench", "x", (f"S{i-1}",) if i else ()) for i in range(n)))


def diamond(width: int, layers: int) -> Plan:
    subs: list[Subtask] = [Subtask("S0", "bench", "x")]
    prev = ["S0"]
    k = 1
    for _ in range(layers):
        mid = [f"S{k + i}" for i in range(width)]
        subs += [Subtask(m, "bench", "x", tuple(prev)) for m in mid]
        k += width
        join = f"S{k}"
        subs.append(Subtask(join, "bench", "x", tuple(mid)))
        k += 1
        prev = [join]
    return Plan(tuple(subs))


async def _bare(plan: Plan) -> None:
    futs = {s.id: asyncio.get_running_loop().create_future() for s in plan.subtasks}

    async def one(s: Subtask) -> None:
        for d in s.deps:
            await futs[d]
        futs[s.id].set_result(None)

    await asyncio.gather(*(one(s) for s in plan.subtasks))


async def _throughput(plans: list[Plan], rounds: int) -> tuple[float, float]:
    pool = _pool(sleep=False)
    n = sum(len(p.subtasks) for p in plans) * rounds
    t = time.perf_counter()
    for _ in range(rounds):
        for p in plans:
            await run_plan(p, pool, concurrency=1024)
    engine = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(rounds):
        for p in plans:
            await _bare(p)
    bare = n / (time.perf_counter() - t)
    return engine, bare


async def _fidelity(latency_s: float) -> dict[str, float]:
    pool = _pool(sleep=True, latency_s=latency_s)
    out = {}
    for name, plan in (("wide", wide(64)), ("deep", deep(12)), ("diamond", diamond(16, 4))):
        ideal = critical_path(plan, {s.id: latency_s for s in plan.subtasks})
        t = time.perf_counter()
        await run_plan(plan, pool, concurrency=1024)
        out[name] = (time.perf_counter() - t) / ideal
    return out


def bench_engine(quick: bool = False) -> dict[str, Any]:
    plans = [wide(100), deep(50), diamond(10, 5)]
    rounds = 5 if quick else 40
    engine, bare = asyncio.run(_throughput(plans, rounds))
    latency = 0.1
    fid = asyncio.run(_fidelity(latency))
    return {
        "calls_per_s": round(engine, 1),
        "bare_asyncio_tasks_per_s": round(bare, 1),
        "calls_per_s_over_bare": round(engine / bare, 3),
        "makespan_over_critical_path": round(max(fid.values()), 4),
        "makespan_over_critical_path_by_shape": {k: round(v, 4) for k, v in fid.items()},
        "fixed_latency_s": latency,
        "calls_measured": sum(len(p.subtasks) for p in plans) * rounds,
        "hardware": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
    }
