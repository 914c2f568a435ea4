"""Benchmarks behind ``e3orch bench``: they return dicts of figures measured in one run."""
