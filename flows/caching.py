"""The Prefect cache policy of the pipeline's tasks: reuse a stage only while that is sound.

A stage's result may be reused when nothing it depends on changed and what it wrote is still
there. The key is ``INPUTS + TASK_SOURCE`` made file-aware:

- the task's inputs (the resolved ``Params`` — i.e. the params.yaml content plus overrides —,
  executor specs, shard numbers, paths), minus ``tracking_parent`` (a new MLflow parent per flow
  run must not defeat the cache);
- the task's source;
- a stat fingerprint (relative path, size, mtime) of every file or folder an input names
  (``missing`` when absent), of every file the params name (executor pools, live data sources)
  and of the ``e3orch`` package's source files — so a re-run upstream stage, an edited pool
  file or edited library code all miss;
- the task's own outputs are not fingerprinted (they change every time it runs); instead
  :func:`submit` recomputes (and re-caches) a task whose outputs are missing, so deleting
  ``models/policy`` re-runs training instead of returning a stale path.

What this deliberately does not do: hash file contents (a 15 GB checkpoint would cost minutes;
a rewritten file with equal bytes simply misses once) or know anything about a stage's logic.
Set ``PREFECT_TASKS_REFRESH_CACHE=true`` to recompute everything regardless.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import Task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy
from prefect.context import TaskRunContext
from prefect.futures import PrefectFuture
from prefect.utilities.hashing import hash_objects

import e3orch

EXCLUDED_INPUTS = ("tracking_parent",)
_PACKAGE = Path(e3orch.__file__).resolve().parent


def fingerprint(path: str | Path) -> list[tuple[str, int, int]] | str:
    """``(relative path, size, mtime_ns)`` of a file, or of every file under a folder; or ``missing``."""
    p = Path(path)
    if not p.exists():
        return "missing"
    if p.is_file():
        st = p.stat()
        return [(p.name, st.st_size, st.st_mtime_ns)]
    out = []
    for root, dirs, files in os.walk(p):
        dirs.sort()
        for name in sorted(files):
            f = Path(root, name)
            st = f.stat()
            out.append((str(f.relative_to(p)), st.st_size, st.st_mtime_ns))
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, (str, Path)):
        yield str(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            yield from _strings(v)


def _existing_path(text: str) -> Path | None:
    if not text or len(text) > 4096 or "\n" in text:
        return None
    p = Path(text)
    try:
        return p if p.exists() else None
    except OSError:
        return None


def _code_fingerprint() -> list[tuple[str, int, int]]:
    files = fingerprint(_PACKAGE)
    return [f for f in files if f[0].endswith(".py")] if isinstance(files, list) else []


def _looks_like_path(text: str) -> bool:
    return bool(text) and len(text) < 4096 and "\n" not in text and ("/" in text or "." in text)


@dataclass
class StageCache(CachePolicy):
    """Cache a stage on its inputs, source, input files and code.

    ``outputs`` maps an input name (a path the task writes) to the files that must exist under
    it for a cached result to be usable (empty: the path itself); see :func:`submit`.
    """

    outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def outputs_exist(self, inputs: Mapping[str, Any]) -> bool:
        for name, required in self.outputs.items():
            value = inputs.get(name)
            if isinstance(value, PrefectFuture) or value is None:
                continue  # not known before the run; nothing to check
            base = Path(str(value))
            if not base.exists() or any(not (base / r).exists() for r in required):
                return False
        return True

    def compute_key(self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str | None:
        keyed: CachePolicy = INPUTS
        for name in EXCLUDED_INPUTS:
            keyed = keyed - name
        files: dict[str, Any] = {}
        for name, value in inputs.items():
            if name in self.outputs or name in EXCLUDED_INPUTS:
                continue
            if hasattr(value, "model_dump"):  # Params: the files it names (pools, data sources)
                for text in _strings(value.model_dump(mode="json")):
                    if (p := _existing_path(text)) is not None and p.is_file():
                        files[str(p.resolve())] = fingerprint(p)
                continue
            for text in _strings(value):
                if _looks_like_path(text):
                    files[str(Path(text).resolve())] = fingerprint(text)
        return hash_objects(
            keyed.compute_key(task_ctx, inputs, flow_parameters, **kwargs),
            TASK_SOURCE.compute_key(task_ctx, inputs, flow_parameters, **kwargs),
            sorted(files.items()),
            _code_fingerprint(),
            raise_on_failure=True,
        )


def stage_cache(**outputs: str | Sequence[str]) -> StageCache:
    """``stage_cache(out_dir=("config.json",))``: cache while ``<out_dir>/config.json`` exists."""
    return StageCache(outputs={k: (v,) if isinstance(v, str) and v else tuple(v) for k, v in outputs.items()})


def submit(task: Task[Any, Any], *args: Any, **kwargs: Any) -> PrefectFuture[Any]:
    """``task.submit(*args, **kwargs)``; recomputed and re-cached when the task's outputs are missing."""
    policy = task.cache_policy
    if isinstance(policy, StageCache):
        bound = inspect.signature(task.fn).bind(*args, **kwargs).arguments
        if not policy.outputs_exist(bound):
            task = task.with_options(refresh_cache=True)
    return task.submit(*args, **kwargs)
