"""Prefect flows over the E³-Orch stage functions (run from the repository root)."""
