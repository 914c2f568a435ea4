"""Turning a system name into an orchestrator: hand-written rules or a policy checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e3orch.executors.base import Pool
from e3orch.orchestration.episode import Orchestrator
from e3orch.orchestration.handwritten import make_handwritten


def is_checkpoint(name: str) -> bool:
    return Path(name).is_dir() and (Path(name) / "config.json").exists()


def check_local_policy(name: str, what: str, hint: str, *, local: bool = False) -> None:
    """Fail at once when ``name`` means a folder here (or ``local``: a default path) and holds no
    policy. A name that could only be a hub id (``org/model``, no local folder ``org``) is left to
    the loader."""
    p = Path(name)
    local = (local or p.is_absolute() or name.startswith(".") or len(p.parts) != 2 or p.exists()
             or Path(p.parts[0]).is_dir())
    if local and not is_checkpoint(name):
        raise FileNotFoundError(f"{what} {name}: not a policy checkpoint directory ({hint})")


def make_orchestrator(name: str, pool: Pool, *, seed: int = 0, policy_options: dict[str, Any] | None = None) -> Orchestrator:
    """``heuristic`` | ``upfront`` | ``sequential`` | ``random`` | ``single:<executor>`` | checkpoint dir."""
    if is_checkpoint(name):
        from e3orch.policy.orchestrator import PolicyOrchestrator  # torch only when a policy is used

        return PolicyOrchestrator.from_checkpoint(name, seed=seed, **(policy_options or {}))
    if ("/" in name or name.startswith(".")) and not name.startswith("single:"):
        raise FileNotFoundError(f"{name}: not a policy checkpoint directory (expected a save_pretrained folder with config.json)")
    return make_handwritten(name, pool.names, seed=seed)
