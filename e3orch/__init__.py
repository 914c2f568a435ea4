"""E³-Orch."""
