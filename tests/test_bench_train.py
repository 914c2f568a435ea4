"""``e3orch bench train`` end to end on the tiny config: every phase and setting is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from e3orch.benchmarks.train import bench_train


def test_bench_train_tiny_run(tiny_params_file: Path) -> None:
    r = bench_train(str(tiny_params_file), quick=True)
    assert r["update_tokens_per_s"] > 0 and r["reference_tokens_per_s"] > 0
    assert r["update_over_reference"] > 0
    assert r["rollout_processes"] == 1  # the tiny config: policy.workers 1
    assert r["completions_per_round"] > 0 and r["completion_tokens_per_round"] > 0
    # the long-completion setting: up to 32 completions, each exactly 64 tokens in quick mode
    assert 0 < r["long_completions"] <= 32 and r["long_completion_tokens"] == 64
    assert r["long_generate_s"] > 0 and r["long_update_s"] > 0
    # completion tokens over generate + update (the printed seconds are rounded to 1 ms)
    expected = r["long_completions"] * 64 / (r["long_generate_s"] + r["long_update_s"])
    assert r["long_completion_tokens_per_s"] == pytest.approx(expected, rel=0.05)
