"""The DAG scheduler: runs a plan's subtasks on their executors, every ready subtask at once.

* Each subtask starts as soon as all its dependencies have finished; independent subtasks run
  concurrently, bounded by ``concurrency`` (an asyncio semaphore).
* A subtask receives its dependencies' outputs as ``context`` (id → output text).
* Executor failures, exceptions and wall-clock timeouts become recorded results (``ok=False``);
  a subtask whose dependency failed is skipped (recorded, zero cost) rather than run on missing
  input.
* Timing: ``makespan_s`` is the critical path of what ran (each subtask starts when its last
  dependency finished, then takes its ``latency_s``) and ``serial_latency_s`` the sum of
  latencies. Real executors report measured latencies, simulated ones virtual latencies, so the
  same formula holds for both and evaluation never waits for simulated time.

What this module deliberately does not do: retry (executors own their retries), choose
executors, or know about milestones. It is a bare asyncio topological runner — tens of
thousands of calls per second — because a framework task per executor call (Prefect, Ray)
would dominate the cost of every rollout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from e3orch.data.sim import stable_seed
from e3orch.executors.base import ExecutionResult, Executor, Pool, SubtaskRequest
from e3orch.orchestration.types import Plan

log = logging.getLogger(__name__)


@dataclass
class PlanRun:
    results: list[ExecutionResult]
    makespan_s: float
    serial_latency_s: float
    cost: float
    wall_s: float


def expand_instruction(instruction: str, task: Any) -> str:
    """``{task}`` in an instruction stands for the task's full text (plans stay one line each)."""
    if task is not None and "{task}" in instruction:
        return instruction.replace("{task}", "\n" + task.question)
    return instruction


def critical_path(plan: Plan, latency: Mapping[str, float]) -> float:
    """Length of the longest dependency path, using ``latency`` per subtask id (missing = 0)."""
    finish: dict[str, float] = {}
    by_id = {s.id: s for s in plan.subtasks}
    for s in plan.subtasks:  # memoised recursion: any order of an acyclic plan works
        _finish(s.id, by_id, latency, finish)
    return max(finish.values(), default=0.0)


def _finish(sid: str, by_id: Mapping[str, Any], latency: Mapping[str, float], memo: dict[str, float]) -> float:
    if sid not in memo:
        start = max((_finish(d, by_id, latency, memo) for d in by_id[sid].deps), default=0.0)
        memo[sid] = start + latency.get(sid, 0.0)
    return memo[sid]


def _raised(executor: Executor, request: SubtaskRequest, exc: BaseException, latency_s: float) -> ExecutionResult:
    """An executor that raised: a recorded failure, never a crash of the episode (an executor bug
    must not take it down)."""
    log.warning("executor %s raised %r on %s", executor.name, exc, request.subtask_id)
    return executor.failure(request, f"executor raised {type(exc).__name__}: {exc}", latency_s=latency_s)


async def run_plan(
    plan: Plan,
    pool: Pool,
    *,
    task: Any = None,
    workspace: Mapping[str, str] | None = None,
    seed: int = 0,
    concurrency: int = 16,
    timeout_s: float = 120.0,
    seed_by_executor: bool = True,
    noise_keys: Mapping[str, str] | None = None,
) -> PlanRun:
    """Execute ``plan`` on ``pool``; never raises for executor-side failures.

    A subtask's execution seed derives from ``seed``, its id, its instruction and, unless
    ``seed_by_executor`` is false, its executor. Without the executor, the same subtask sent to two
    executors draws the same noise: a simulated executor then succeeds wherever a weaker one at
    that skill does (common random numbers across executors). ``noise_keys`` (subtask id → key)
    replaces the id in that derivation (``engine.noise_key: part``: the parts a subtask names and
    their attempt numbers)."""
    t0 = time.perf_counter()
    by_id = {s.id: s for s in plan.subtasks}
    done: dict[str, asyncio.Future[ExecutionResult]] = {
        s.id: asyncio.get_running_loop().create_future() for s in plan.subtasks
    }
    sem = asyncio.Semaphore(concurrency)
    state = dict(workspace or {})

    async def one(sid: str) -> None:
        sub = by_id[sid]
        key = noise_keys.get(sid, sid) if noise_keys else sid
        dep_results = [await done[d] for d in sub.deps]
        failed = [r.id for r in dep_results if not r.ok]
        if failed:
            res = ExecutionResult(sid, sub.executor, False, error=f"skipped: dependency {', '.join(failed)} failed")
        else:
            req = SubtaskRequest(
                task_id=getattr(task, "task_id", ""),
                subtask_id=sid,
                instruction=expand_instruction(sub.instruction, task),
                context=tuple((r.id, r.output) for r in dep_results),
                task=task,
                state=state,
                seed=(stable_seed(seed, key, sub.executor, sub.instruction) if seed_by_executor
                      else stable_seed(seed, key, sub.instruction)),
            )
            if sub.executor not in pool:
                res = ExecutionResult(sid, sub.executor, False, error=f"unknown executor {sub.executor!r}")
                done[sid].set_result(res)
                return
            executor = pool[sub.executor]
            if getattr(executor, "virtual_time", False):
                # virtual time (a simulated executor that does not sleep): the call returns at once, so it
                # needs neither a slot nor a timeout timer, which cost more than the call itself
                try:
                    res = await executor.run(req)
                except Exception as err:
                    res = _raised(executor, req, err, 0.0)
            else:
                async with sem:
                    started = time.perf_counter()
                    call = asyncio.ensure_future(executor.run(req))
                    # asyncio.wait (not wait_for): an executor's own TimeoutError must not pass for ours
                    finished, _ = await asyncio.wait({call}, timeout=timeout_s)
                    if not finished:
                        call.cancel()
                        res = executor.failure(req, f"timeout after {timeout_s:g}s", latency_s=time.perf_counter() - started)
                    elif (exc := call.exception()) is not None:
                        res = _raised(executor, req, exc, time.perf_counter() - started)
                    else:
                        res = call.result()
        done[sid].set_result(res)

    await asyncio.gather(*(one(s.id) for s in plan.subtasks))
    results = [done[s.id].result() for s in plan.subtasks]
    latency = {r.id: r.latency_s for r in results}
    finish: dict[str, float] = {}
    for r in results:  # start time on the plan's clock, for traces
        r.start_s = _finish(r.id, by_id, latency, finish) - r.latency_s
    makespan = max(finish.values(), default=0.0)
    return PlanRun(
        results=results,
        makespan_s=makespan,
        serial_latency_s=sum(latency.values()),
        cost=sum(r.cost for r in results),
        wall_s=time.perf_counter() - t0,
    )
