"""The asyncio DAG scheduler: parallelism, context forwarding, bounds, failures, exact timing.

A small recording executor (a real :class:`Executor` registered under a test-only kind) logs
start/end times; tests assert orderings, never speeds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from e3orch.executors.base import (
    ExecutionResult,
    Executor,
    ExecutorSpec,
    SubtaskRequest,
    build_pool,
    register_executor,
)
from e3orch.orchestration.scheduler import PlanRun, critical_path, run_plan
from e3orch.orchestration.types import Plan, Subtask


@register_executor("test-recorder")
class RecorderExecutor(Executor):
    """Behaviour from the spec's options: ``mode`` = echo | sleep | raise | hang | fail."""

    def __init__(self, spec: ExecutorSpec) -> None:
        super().__init__(spec)
        self.mode = str(spec.options.get("mode", "echo"))
        self.sleep_s = float(spec.options.get("sleep_s", 0.0))
        self.requests: list[SubtaskRequest] = []
        self.spans: dict[str, tuple[float, float]] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.cancelled: list[str] = []

    async def run(self, request: SubtaskRequest) -> ExecutionResult:
        self.requests.append(request)
        start = time.perf_counter()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.mode == "raise":
                raise RuntimeError("boom")
            if self.mode == "raise-timeout":  # e.g. socket.timeout, which is TimeoutError since 3.10
                raise TimeoutError("connect timed out")
            if self.mode == "hang":
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancelled.append(request.subtask_id)
                    raise
            if self.mode == "fail":
                return self.failure(request, "refused", latency_s=0.5, cost=0.25)
            if self.sleep_s:
                await asyncio.sleep(self.sleep_s)
            ctx = ";".join(f"{k}={v}" for k, v in request.context)
            return ExecutionResult(request.subtask_id, self.name, True, f"out({request.subtask_id})[{ctx}]",
                                   cost=1.0, latency_s=0.1)
        finally:
            self.in_flight -= 1
            self.spans[request.subtask_id] = (start, time.perf_counter())


def recorder_pool(**executors: dict[str, Any]):  # type: ignore[no-untyped-def]
    return build_pool([ExecutorSpec.model_validate({"name": n, "kind": "test-recorder", **o}) for n, o in executors.items()])


def sim_spec(name: str, base_s: float, **extra: Any) -> ExecutorSpec:
    return ExecutorSpec.model_validate({
        "name": name, "kind": "simulated", "skills": {"reason": 1.0},
        "price": {"input_per_1k": 1.0, "output_per_1k": 2.0},
        "latency": {"base_s": base_s, "per_1k_tokens_s": 0.0}, "latency_noise": 0.0, **extra,
    })


def run(plan: Plan, pool, **kw: Any) -> PlanRun:  # type: ignore[no-untyped-def]
    return asyncio.run(run_plan(plan, pool, **kw))


def by_id(r: PlanRun) -> dict[str, ExecutionResult]:
    return {x.id: x for x in r.results}


# -- parallelism and ordering -----------------------------------------------------------------


def test_independent_subtasks_overlap_and_dependants_wait() -> None:
    pool = recorder_pool(w={"mode": "sleep", "sleep_s": 0.15})
    plan = Plan((
        Subtask("A", "w", "a"), Subtask("B", "w", "b"), Subtask("C", "w", "c"),
        Subtask("D", "w", "d", ("A", "B", "C")),
        Subtask("E", "w", "e", ("D",)),
    ))
    out = run(plan, pool)
    assert all(r.ok for r in out.results)
    spans = pool["w"].spans
    # every independent subtask started before any of them ended: they ran at the same time
    assert max(spans[s][0] for s in "ABC") < min(spans[s][1] for s in "ABC")
    assert pool["w"].max_in_flight >= 3
    assert spans["D"][0] >= max(spans[s][1] for s in "ABC")
    assert spans["E"][0] >= spans["D"][1]
    assert [r.id for r in out.results] == list("ABCDE")  # results in plan order


def test_dependency_outputs_reach_the_dependant_as_context_in_dep_order() -> None:
    pool = recorder_pool(w={})
    plan = Plan((Subtask("S1", "w", "one"), Subtask("S2", "w", "two"), Subtask("S3", "w", "three", ("S2", "S1"))))
    out = run(plan, pool, seed=7)
    reqs = {r.subtask_id: r for r in pool["w"].requests}
    assert reqs["S1"].context == ()
    assert reqs["S3"].context == (("S2", "out(S2)[]"), ("S1", "out(S1)[]"))
    assert reqs["S3"].instruction == "three"
    assert by_id(out)["S3"].output == "out(S3)[S2=out(S2)[];S1=out(S1)[]]"
    # per-call seeds are distinct and reproducible
    seeds = {sid: r.seed for sid, r in reqs.items()}
    assert len(set(seeds.values())) == 3
    pool2 = recorder_pool(w={})
    run(plan, pool2, seed=7)
    assert {r.subtask_id: r.seed for r in pool2["w"].requests} == seeds


def test_workspace_and_task_are_handed_to_every_executor() -> None:
    pool = recorder_pool(w={})
    task = object()
    run(Plan((Subtask("S1", "w", "x"),)), pool, task=task, workspace={"P1": "v1"})
    req = pool["w"].requests[0]
    assert req.task is task
    assert dict(req.state) == {"P1": "v1"}


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_concurrency_bound_is_respected(concurrency: int) -> None:
    pool = recorder_pool(w={"mode": "sleep", "sleep_s": 0.03})
    plan = Plan(tuple(Subtask(f"S{i}", "w", str(i)) for i in range(7)))
    out = run(plan, pool, concurrency=concurrency)
    assert all(r.ok for r in out.results)
    assert pool["w"].max_in_flight == concurrency


# -- failures ---------------------------------------------------------------------------------


def test_raising_executor_is_a_recorded_failure_and_dependants_are_skipped() -> None:
    pool = recorder_pool(bad={"mode": "raise"}, good={})
    plan = Plan((
        Subtask("S1", "bad", "x"),
        Subtask("S2", "good", "y"),
        Subtask("S3", "good", "z", ("S1", "S2")),
        Subtask("S4", "good", "w", ("S3",)),
        Subtask("S5", "good", "v", ("S2",)),
    ))
    out = run(plan, pool)
    r = by_id(out)
    assert not r["S1"].ok and r["S1"].error == "executor raised RuntimeError: boom"
    assert r["S2"].ok and r["S5"].ok
    for sid, failed in (("S3", "S1"), ("S4", "S3")):
        assert not r[sid].ok
        assert r[sid].error == f"skipped: dependency {failed} failed"
        assert (r[sid].cost, r[sid].latency_s) == (0.0, 0.0)
    # skipped subtasks never reached the executor
    assert sorted(q.subtask_id for q in pool["good"].requests) == ["S2", "S5"]
    assert out.cost == pytest.approx(2.0)


def test_hanging_executor_times_out_is_cancelled_and_dependants_are_skipped() -> None:
    pool = recorder_pool(hang={"mode": "hang"}, good={})
    plan = Plan((Subtask("S1", "hang", "x"), Subtask("S2", "good", "y", ("S1",)), Subtask("S3", "good", "z")))
    out = run(plan, pool, timeout_s=0.2)
    r = by_id(out)
    assert not r["S1"].ok and r["S1"].error == "timeout after 0.2s"
    assert r["S1"].latency_s >= 0.2 - 1e-3  # measured, at least the limit
    assert pool["hang"].cancelled == ["S1"]
    assert not r["S2"].ok and r["S2"].error == "skipped: dependency S1 failed" and r["S2"].cost == 0.0
    assert r["S3"].ok


def test_executor_raising_timeout_error_is_not_reported_as_the_wall_clock_limit() -> None:
    pool = recorder_pool(bad={"mode": "raise-timeout"})
    out = run(Plan((Subtask("S1", "bad", "x"),)), pool, timeout_s=120.0)
    r = out.results[0]
    assert not r.ok
    assert r.error == "executor raised TimeoutError: connect timed out"


def test_executor_reported_failure_is_kept_with_its_cost() -> None:
    pool = recorder_pool(no={"mode": "fail"}, good={})
    out = run(Plan((Subtask("S1", "no", "x"), Subtask("S2", "good", "y", ("S1",)))), pool)
    r = by_id(out)
    assert (r["S1"].ok, r["S1"].error, r["S1"].cost) == (False, "refused", 0.25)
    assert r["S2"].error == "skipped: dependency S1 failed"
    assert out.cost == 0.25
    assert out.makespan_s == pytest.approx(0.5)
    assert out.serial_latency_s == pytest.approx(0.5)


def test_empty_plan_runs_nothing() -> None:
    out = run(Plan(()), recorder_pool(w={}))
    assert (out.results, out.makespan_s, out.serial_latency_s, out.cost) == ([], 0.0, 0.0, 0.0)


# -- exact timing -----------------------------------------------------------------------------


def test_makespan_is_the_critical_path_and_serial_the_sum_exactly() -> None:
    pool = build_pool([sim_spec("one", 1.0), sim_spec("two", 2.0), sim_spec("half", 0.5)])
    plan = Plan((
        Subtask("S1", "one", "a"),
        Subtask("S2", "two", "b"),
        Subtask("S3", "half", "c", ("S1",)),
        Subtask("S4", "one", "d", ("S2", "S3")),
        Subtask("S5", "half", "e", ("S1",)),
    ))
    out = run(plan, pool)
    r = by_id(out)
    assert all(x.ok for x in out.results)
    assert {k: v.latency_s for k, v in r.items()} == {"S1": 1.0, "S2": 2.0, "S3": 0.5, "S4": 1.0, "S5": 0.5}
    # S2 (2.0) -> S4 (1.0) is the critical path; S1 -> S3 only reaches 1.5
    assert out.makespan_s == 3.0
    assert out.serial_latency_s == 5.0
    assert {k: v.start_s for k, v in r.items()} == {"S1": 0.0, "S2": 0.0, "S3": 1.0, "S4": 2.0, "S5": 1.0}
    assert out.cost == pytest.approx(sum(x.cost for x in out.results))
    assert out.makespan_s == critical_path(plan, {k: v.latency_s for k, v in r.items()})


def test_chain_makespan_equals_serial_and_wide_makespan_equals_the_longest() -> None:
    pool = build_pool([sim_spec("one", 1.0), sim_spec("two", 2.0)])
    chain = Plan((Subtask("S1", "one", "a"), Subtask("S2", "two", "b", ("S1",)), Subtask("S3", "one", "c", ("S2",))))
    out = run(chain, pool)
    assert (out.makespan_s, out.serial_latency_s) == (4.0, 4.0)
    wide = Plan((Subtask("S1", "one", "a"), Subtask("S2", "two", "b"), Subtask("S3", "one", "c")))
    out = run(wide, pool)
    assert (out.makespan_s, out.serial_latency_s) == (2.0, 4.0)


def test_makespan_counts_only_what_ran() -> None:
    pool = build_pool([sim_spec("broken", 2.0, fault_rate=1.0), sim_spec("one", 1.0)])
    plan = Plan((
        Subtask("S1", "broken", "a"),
        Subtask("S2", "one", "b", ("S1",)),  # skipped: would have made the path 2*0.3 + 1
        Subtask("S3", "one", "c", ("S2",)),
        Subtask("S4", "one", "d"),
    ))
    out = run(plan, pool)
    r = by_id(out)
    assert r["S1"].error == "executor error: simulated fault"
    assert r["S1"].latency_s == pytest.approx(0.6)
    assert [r[s].error for s in ("S2", "S3")] == ["skipped: dependency S1 failed", "skipped: dependency S2 failed"]
    assert out.makespan_s == pytest.approx(1.0)
    assert out.serial_latency_s == pytest.approx(1.6)


def test_critical_path_on_hand_built_latencies() -> None:
    plan = Plan((
        Subtask("A", "x", "."), Subtask("B", "x", ".", ("A",)), Subtask("C", "x", ".", ("A",)),
        Subtask("D", "x", ".", ("B", "C")),
    ))
    assert critical_path(plan, {"A": 1.0, "B": 5.0, "C": 2.0, "D": 0.25}) == 6.25
    assert critical_path(plan, {"A": 1.0}) == 1.0  # missing latencies count as 0
    assert critical_path(Plan(()), {}) == 0.0


def test_without_the_executor_in_the_seed_a_stronger_executor_succeeds_wherever_a_weaker_one_does() -> None:
    from e3orch.data.sim import generate_split

    task = next(t for t in generate_split(0, "train", 3)
                if any(r.skill == "reason" and not r.deps for r in t.requirements))
    part = next(r for r in task.requirements if r.skill == "reason" and not r.deps)
    pool = build_pool([sim_spec("weak", 0.0, skills={"reason": 0.6}), sim_spec("strong", 0.0, skills={"reason": 0.9})])

    def correct(executor: str, seed: int, by_executor: bool) -> bool:
        out = run(Plan((Subtask("S1", executor, f"Solve {part.id}."),)), pool, task=task, seed=seed,
                  seed_by_executor=by_executor)
        return f"{part.id} = {part.value} " in out.results[0].output

    for by_executor in (False, True):
        pairs = [(correct("weak", s, by_executor), correct("strong", s, by_executor)) for s in range(200)]
        weak_only = sum(w and not s for w, s in pairs)
        assert sum(s for _, s in pairs) > sum(w for w, _ in pairs)
        if by_executor:
            assert weak_only > 0  # independent draws: the weaker one sometimes wins
        else:
            assert weak_only == 0  # one draw per subtask: the stronger one wins wherever the weaker one does


def test_virtual_time_executors_take_the_direct_path_with_the_same_results() -> None:
    """A virtual-time executor (simulated, no sleeping) is awaited directly, without a slot or a
    timeout timer: the same results as through the timed path, and a raise is still a recorded
    failure whose dependants are skipped."""
    pool = recorder_pool(bad={"mode": "raise"}, good={})
    for e in pool.executors.values():
        e.virtual_time = True
    plan = Plan((Subtask("S1", "bad", "x"), Subtask("S2", "good", "y"), Subtask("S3", "good", "z", ("S1",)),
                 Subtask("S4", "good", "w", ("S2",))))
    fast = by_id(run(plan, pool))
    assert fast["S1"].error == "executor raised RuntimeError: boom" and fast["S3"].error == "skipped: dependency S1 failed"
    assert fast["S4"].ok and fast["S4"].output == "out(S4)[S2=out(S2)[]]"
    timed_pool = recorder_pool(bad={"mode": "raise"}, good={})
    timed = by_id(run(plan, timed_pool))
    assert [(r.ok, r.output, r.error, r.cost) for r in fast.values()] == [(r.ok, r.output, r.error, r.cost) for r in timed.values()]
    # simulated executors: identical plans give identical results whichever path ran them
    sims = build_pool([sim_spec("a", 1.0), sim_spec("b", 2.0)])
    splan = Plan((Subtask("S1", "a", "Decide P1."), Subtask("S2", "b", "Decide P2.", ("S1",))))
    direct = run(splan, sims, seed=5)
    for e in sims.executors.values():
        e.virtual_time = False
    slow = run(splan, sims, seed=5)
    assert [(r.ok, r.output, r.cost, r.latency_s) for r in direct.results] == [(r.ok, r.output, r.cost, r.latency_s) for r in slow.results]
    assert direct.makespan_s == slow.makespan_s
