"""The evaluate stage: every system on the eval split, on the training pool, the transfer pool
and ``evaluate.generated_pools`` generated pools never seen in any form.

Systems: the trained policy (``e3orch``), its warm start (``warmstart``), the hand-written
orchestrators and each single executor (single executors only on the two named pools). Writes
``reports/metrics.json`` (DESIGN §5 shape: ``systems``, ``per_benchmark``, ``transfer.systems``,
``transfer.per_benchmark``; plus ``generated.systems`` over all generated pools' episodes and
``generated.pools`` per pool; ``targets``: the trained policy's training targets,
:mod:`e3orch.evaluation.targets`), the episodes, the generated pools themselves
(``generated_pools/pool-<seed>.yaml``), the Markdown report and the plots.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from e3orch.config import Params
from e3orch.evaluation.evaluate import limit_per_benchmark, metrics_table, run_systems
from e3orch.evaluation.systems import make_orchestrator
from e3orch.evaluation.targets import judge
from e3orch.executors.base import ExecutorSpec, build_pool
from e3orch.executors.generated import generate_pool
from e3orch.files import write_text_atomic
from e3orch.orchestration.types import Episode


def system_names(params: Params, pool_names: list[str], policies: dict[str, str], singles: bool = True) -> list[str]:
    names = [n for n, p in policies.items() if Path(p).exists()]
    names += list(params.evaluate.baselines)
    if params.evaluate.single_executors and singles:
        names += [f"single:{e}" for e in pool_names]
    return names


def evaluate_pool(params: Params, tasks: list[Any], pool_path: str | list[ExecutorSpec], policies: dict[str, str],
                  on_system: Callable[[str], None] | None = None, *, singles: bool = True,
                  ) -> tuple[dict[str, Any], dict[str, list[Episode]]]:
    results, redrawn = run_pool_systems(params, tasks, pool_path, policies, on_system, singles=singles)
    return metrics_table(results, redrawn), results


def run_pool_systems(params: Params, tasks: list[Any], pool_path: str | list[ExecutorSpec], policies: dict[str, str],
                     on_system: Callable[[str], None] | None = None, *, singles: bool = True,
                     only: Sequence[str] | None = None, skip: Sequence[str] = (),
                     ) -> tuple[dict[str, list[Episode]], dict[str, int]]:
    """Each system of the pool (``only``: those of them; none of ``skip``) on ``tasks``, in
    :func:`system_names` order: their episodes and re-drawn milestones (:func:`run_systems`). A
    system's episodes depend on its seed, the tasks and the pool, not on the systems run beside it."""
    pool = build_pool(pool_path)
    seed = params.evaluate.seed
    names = [n for n in system_names(params, pool.names, policies, singles)
             if (only is None or n in only) and n not in skip]
    systems = ((name, make_orchestrator(policies.get(name, name), pool, seed=seed,
                                        policy_options={"name": name, "params": params}))
               for name in names)  # each made when its turn comes

    async def go() -> tuple[dict[str, list[Episode]], dict[str, int]]:
        try:
            return await run_systems(systems, tasks, pool, params.engine, seed=seed,
                                     on_system=(lambda name, _eps: on_system(name)) if on_system else None)
        finally:
            await pool.aclose()

    return asyncio.run(go())


def evaluate_stage(params: Params, tasks: list[Any], policies: dict[str, str], out_dir: str | Path,
                   on_system: Callable[[str], None] | None = None) -> dict[str, Any]:
    from e3orch.commands.common import resolve_pool_path
    from e3orch.evaluation.report import write_report

    ecfg = params.evaluate
    tasks = limit_per_benchmark(tasks, ecfg.limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    named = [str(resolve_pool_path(ecfg.executors)), str(resolve_pool_path(ecfg.transfer_executors))]
    generated = [generate_pool(ecfg.generated_seed + i) for i in range(ecfg.generated_pools)]
    singles = [True, True] + [False] * len(generated)  # single executors on the two named pools only
    tables = evaluate_pools(params, tasks, [*named, *generated], policies, on_system, singles=singles)
    (main, eps), (transfer, teps) = tables[:2]
    metrics = {
        **main,
        "transfer": transfer,
        "config": {"split": ecfg.split, "n_tasks": len(tasks), "seed": ecfg.seed,
                   "executors": ecfg.executors, "transfer_executors": ecfg.transfer_executors,
                   "generated_pools": [ecfg.generated_seed + i for i in range(ecfg.generated_pools)]},
    }
    groups: list[tuple[str, dict[str, list[Episode]]]] = [("default", eps), ("transfer", teps)]
    if ecfg.generated_pools:
        metrics["generated"], gen_groups = generated_tables(params, generated, tables[2:], out / "generated_pools")
        groups += gen_groups
    metrics["targets"] = judge(metrics)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    with (out / "episodes.jsonl.partial").open("w") as f:
        for pool_name, group in groups:
            for name, episodes in group.items():
                for ep in episodes:
                    f.write(json.dumps({"pool": pool_name, "system": name, **ep.to_dict()}) + "\n")
    (out / "episodes.jsonl.partial").replace(out / "episodes.jsonl")
    write_report(metrics, out)
    return metrics


def evaluate_pools(params: Params, tasks: list[Any], pools: Sequence[str | list[ExecutorSpec]], policies: dict[str, str],
                   on_system: Callable[[str], None] | None = None, *, singles: Sequence[bool],
                   ) -> list[tuple[dict[str, Any], dict[str, list[Episode]]]]:
    """:func:`evaluate_pool` of each pool, in order. With ``policy.workers`` (on a CPU host) the work
    runs in that many spawned processes, each on one torch thread, as jobs of one pool each: each
    policy on its own (they take most of the time) and the pool's hand-written and single-executor
    systems together, the policies' jobs first, so that the processes finish together. A system's
    episodes are the same in any process and beside any other system, and so are the figures.
    ``on_system`` is then called for a job's systems when the job is done."""
    from concurrent.futures import as_completed

    from e3orch.policy.workers import died, one_thread, spawn_pool, worker_count

    processes = worker_count(params.policy)
    if processes < 2:
        return [evaluate_pool(params, tasks, pool, policies, on_system, singles=s) for pool, s in zip(pools, singles)]
    from concurrent.futures.process import BrokenProcessPool

    named = [n for n, p in policies.items() if Path(p).exists()]
    jobs: list[tuple[int, dict[str, Any]]] = [(i, {"only": [n]}) for n in named for i in range(len(pools))]
    jobs += [(i, {"skip": named}) for i in range(len(pools))]  # after the policies (the longest jobs): the rest
    runs: list[dict[int, dict[str, list[Episode]]]] = [{} for _ in pools]  # per pool: each job's episodes by system
    redrawn: list[dict[str, int]] = [{} for _ in pools]
    with spawn_pool(min(processes, len(jobs)), one_thread) as ex:
        futures = {ex.submit(run_pool_systems, params, tasks, pools[i], policies, singles=singles[i], **which): (i, j)
                   for j, (i, which) in enumerate(jobs)}
        try:
            for f in as_completed(futures):
                i, j = futures[f]
                results, drawn = f.result()
                runs[i][j] = results
                redrawn[i].update(drawn)
                if on_system:
                    for name in results:
                        on_system(name)
        except BrokenProcessPool as e:
            raise died(e) from e
        finally:  # a job that failed: the others not started yet are not run
            for f in futures:
                f.cancel()
    out = []
    for i in range(len(pools)):
        # system_names order, as one process runs them: the policies' jobs come first in job order
        results = {name: eps for j in sorted(runs[i]) for name, eps in runs[i][j].items()}
        out.append((metrics_table(results, redrawn[i]), results))
    return out


def generated_tables(params: Params, pools: Sequence[list[ExecutorSpec]],
                     tables: Sequence[tuple[dict[str, Any], dict[str, list[Episode]]]], pools_dir: Path,
                     ) -> tuple[dict[str, Any], list[tuple[str, dict[str, list[Episode]]]]]:
    """The generated pools' part of metrics.json from each pool's :func:`evaluate_pool` (every
    system, no single executors): ``{systems, per_benchmark}`` over all pools' episodes together,
    plus ``pools`` (seed, members, systems) per pool. Each pool is also written as a pool file, so
    any result can be reproduced with ``--executors``."""
    import yaml

    ecfg = params.evaluate
    pools_dir.mkdir(parents=True, exist_ok=True)
    merged: dict[str, list[Episode]] = {}
    per_pool: list[dict[str, Any]] = []
    groups: list[tuple[str, dict[str, list[Episode]]]] = []
    for i, (specs, (table, results)) in enumerate(zip(pools, tables)):
        seed = ecfg.generated_seed + i
        path = pools_dir / f"pool-{seed}.yaml"
        header = f"# generate_pool({seed}): never seen in training (e3orch/executors/generated.py)\n"
        path.write_text(header + yaml.safe_dump({"executors": [s.model_dump(exclude_none=True) for s in specs]},
                                                sort_keys=False))
        per_pool.append({"seed": seed, "executors": [s.name for s in specs], "systems": table["systems"]})
        groups.append((f"generated-{seed}", results))
        for name, episodes in results.items():
            merged.setdefault(name, []).extend(episodes)
    return {**metrics_table(merged), "pools": per_pool}, groups
