"""Policy backends behind one interface (generate with log-probs; score given completions)."""

from __future__ import annotations

from e3orch.policy.backends.base import Generation, PolicyBackend, make_backend

__all__ = ["Generation", "PolicyBackend", "make_backend"]
