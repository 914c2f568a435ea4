"""Turning a system name into an orchestrator: hand-written rules or a policy checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e3orch.executors.base import Pool
from e3orch.orchestration.episode import Orchestrator
from e3orch.orchestration.handwritten import make_handwritten


def is_checkpoint(name: str) -> bool:
    return Path(name).is_dir() and (Path(name) / "config.json").exists()


def make_orchestrator(name: str, pool: Pool, *, seed: int = 0, policy_options: dict[str, Any] | None = None) -> Orchestrator:
    """``heuristic`` | ``upfront`` | ``sequential`` | ``random`` | ``single:<executor>`` | checkpoint dir."""
    if is_checkpoint(name):
        from e3orch.policy.orchestrator import PolicyOrchestrator  # torch only when a policy is used

        return PolicyOrchestrator.from_checkpoint(name, seed=seed, **(policy_options or {}))
    if ("/" in name or name.startswith(".")) and not name.startswith("single:"):
        raise FileNotFoundError(f"{name}: not a policy checkpoint directory (expected a save_pretrained folder with config.json)")
    return make_handwritten(name, pool.names, seed=seed)
