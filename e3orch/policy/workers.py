"""Policy episodes on several CPU processes (``policy.workers``).

A rollout or a validation run alternates between generating (torch, one thread) and running
episodes (the engine's Python). Both hold the GIL for most of their time with a ~1M-parameter
policy, so one process keeps about one core busy however many threads it has. Here the work is
split by task: this process runs the first share with its own backend, and each further share
runs in a spawned worker process that holds its own copy of the policy (loaded once, sent the
trainer's current weights with each job). Every episode's seeds are keyed by its task, so a
task's episodes are the same whichever process runs them; what a share changes is only which
prompts are batched together (the rounding of a few log-probs).

Not here: GPU or vLLM backends (one process keeps a GPU or a server busy) and several training
processes (Accelerate already splits the tasks between them) run in one process each
(:func:`worker_count`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_backend: Any = None  # a worker process's own policy backend (set by _start)
_DIED = ("policy.workers: a worker process died ({}). Workers are spawned and import the main module: a script "
         "that trains or evaluates must make its calls under `if __name__ == \"__main__\":`. Or set "
         "policy.workers: 1 to run every episode in this process")


def died(error: BaseException) -> RuntimeError:
    """The error to raise when a worker process died (``BrokenProcessPool``), saying the usual cause."""
    return RuntimeError(_DIED.format(error))


def worker_count(pc: Any, *, training_processes: int = 1) -> int:
    """How many processes run the policy's episodes: ``policy.workers`` (0: one per CPU core) with
    the transformers backend on the CPU and one training process; 1 otherwise."""
    from e3orch.policy.backends.base import on_cpu

    if pc.backend != "transformers" or training_processes > 1 or not on_cpu(pc.device):
        return 1
    return pc.workers or os.cpu_count() or 1


def spawn_pool(workers: int, initializer: Callable[..., None], initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """``workers`` spawned processes (a forked one would inherit torch's threads and locks), each
    set up by ``initializer``."""
    import multiprocessing

    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)


def one_thread() -> None:
    """A worker process's torch on one thread: the processes share the cores, one each."""
    import torch

    torch.set_num_threads(1)


def _start(pc: Any, model_dir: str) -> None:
    """A worker's initializer: its own copy of the policy, everything on one torch thread."""
    from e3orch.policy.backends.base import backend_from_params

    global _backend
    one_thread()
    _backend = backend_from_params(pc.model_copy(update={"threads": 1, "generation_threads": 1}), model_dir)


def _ready() -> bool:
    return _backend is not None


def _pack(weights: dict[str, Any]) -> bytes:
    """A state dict as plain bytes. Sent as tensors, torch's multiprocessing pickler would move their
    storages to shared memory and keep a file-descriptor server thread in this process, which then
    took about a tenth of its two cores' time from training."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(weights, buf)
    return buf.getvalue()


def _call(fn: Callable[..., R], weights: bytes | None, share: Any, index: int, args: tuple[Any, ...]) -> R:
    if weights is not None:
        import io

        import torch

        _backend.update_weights(torch.load(io.BytesIO(weights), weights_only=True))
    return fn(_backend, share, index, *args)


class PolicyWorkers:
    """``processes`` in all: this one and ``processes - 1`` spawned workers, each with a copy of
    the policy in ``model_dir`` (a warm start, or any saved policy). The workers start on first
    use and live until :meth:`close`, so a training run pays their start (imports, loading) once."""

    def __init__(self, pc: Any, model_dir: str | Path, processes: int) -> None:
        if processes < 2:
            raise ValueError(f"PolicyWorkers needs at least two processes, got {processes}")
        self.processes = processes
        self._pool = spawn_pool(processes - 1, _start, (pc, str(model_dir)))

    def start(self) -> None:
        """Start the workers now and wait until they answer (each has loaded its policy), so that
        what is timed next does not include their start."""
        try:
            for f in [self._pool.submit(_ready) for _ in range(self.processes - 1)]:
                f.result()
        except BrokenProcessPool as e:
            raise died(e) from e

    def map_shares(self, fn: Callable[..., R], local: Any, items: Sequence[T], *args: Any,
                   weights: dict[str, Any] | None = None) -> list[R]:
        """``fn(backend, share, i, *args)`` for each share ``i``, ``items[i::processes]``: share 0 here with
        ``local`` (this process's backend), the others in the workers, their backends given
        ``weights`` first (a state dict; None: the weights they hold). ``fn`` must be a module-level
        function (it is sent by name). Returns the shares' results in share order."""
        shares = [list(items[i :: self.processes]) for i in range(self.processes)]
        packed = _pack(weights) if weights is not None else None
        try:
            futures: list[Future[R]] = [self._pool.submit(_call, fn, packed, share, i, args)
                                        for i, share in enumerate(shares) if i]
        except BrokenProcessPool as e:
            raise died(e) from e
        try:
            mine = fn(local, shares[0], 0, *args)
            return [mine, *(f.result() for f in futures)]
        except BrokenProcessPool as e:
            raise died(e) from e
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> PolicyWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
