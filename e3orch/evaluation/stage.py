"""The evaluate stage: every system on the eval split, on the training pool and the transfer pool.

Systems: the trained policy (``e3orch``), its warm start (``warmstart``), the hand-written
orchestrators and each single executor. Writes ``reports/metrics.json`` (DESIGN §5 shape:
``systems``, ``per_benchmark``, ``transfer.systems``, ``transfer.per_benchmark``), the episodes,
the Markdown report and the plots.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e3orch.config import Params
from e3orch.evaluation.evaluate import limit_per_benchmark, metrics_table, run_system
from e3orch.evaluation.systems import make_orchestrator
from e3orch.executors.base import build_pool
from e3orch.orchestration.types import Episode


def system_names(params: Params, pool_names: list[str], policies: dict[str, str]) -> list[str]:
    names = [n for n, p in policies.items() if Path(p).exists()]
    names += list(params.evaluate.baselines)
    if params.evaluate.single_executors:
        names += [f"single:{e}" for e in pool_names]
    return names


def evaluate_pool(params: Params, tasks: list[Any], pool_path: str, policies: dict[str, str],
                  on_system: Callable[[str], None] | None = None) -> tuple[dict[str, Any], dict[str, list[Episode]]]:
    pool = build_pool(pool_path)
    results: dict[str, list[Episode]] = {}

    async def go() -> None:
        for name in system_names(params, pool.names, policies):
            orch = make_orchestrator(policies.get(name, name), pool, seed=params.evaluate.seed,
                                     policy_options={"name": name, "params": params})
            results[name] = await run_system(orch, tasks, pool, params.engine, seed=params.evaluate.seed)
            await orch.aclose()
            if on_system:
                on_system(name)
        await pool.aclose()

    asyncio.run(go())
    return metrics_table(results), results


def evaluate_stage(params: Params, tasks: list[Any], policies: dict[str, str], out_dir: str | Path,
                   on_system: Callable[[str], None] | None = None) -> dict[str, Any]:
    from e3orch.commands.common import resolve_pool_path
    from e3orch.evaluation.report import write_report

    ecfg = params.evaluate
    tasks = limit_per_benchmark(tasks, ecfg.limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    main, eps = evaluate_pool(params, tasks, str(resolve_pool_path(ecfg.executors)), policies, on_system)
    transfer, teps = evaluate_pool(params, tasks, str(resolve_pool_path(ecfg.transfer_executors)), policies, on_system)
    metrics = {
        **main,
        "transfer": transfer,
        "config": {"split": ecfg.split, "n_tasks": len(tasks), "seed": ecfg.seed,
                   "executors": ecfg.executors, "transfer_executors": ecfg.transfer_executors},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    with (out / "episodes.jsonl").open("w") as f:
        for pool_name, group in (("default", eps), ("transfer", teps)):
            for name, episodes in group.items():
                for ep in episodes:
                    f.write(json.dumps({"pool": pool_name, "system": name, **ep.to_dict()}) + "\n")
    write_report(metrics, out)
    return metrics
