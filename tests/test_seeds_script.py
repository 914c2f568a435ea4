"""scripts/seeds.sh's summary: mean ± population spread over seeds, per pool and system, each
seed's e3orch against its warm start and its training targets; SUMMARY_ONLY=1 summarises seeds
already run (side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _metrics(acc: float, cost: float) -> dict[str, object]:
    def row(a: float, c: float) -> dict[str, float]:
        return {"accuracy": a, "cost": c, "ie": a / c}

    systems = {"e3orch": row(acc, cost), "warmstart": row(0.5, 2.0), "thrifty": row(0.75, 2.5)}
    return {"systems": systems, "transfer": {"systems": {"e3orch": row(acc / 2, cost)}}}


def _run(out: Path, *seeds: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUMMARY_ONLY": "1", "OUT": str(out), "PY": sys.executable, "E3": "false"}
    return subprocess.run(["bash", str(REPO / "scripts/seeds.sh"), *seeds], env=env, text=True,
                          capture_output=True, timeout=120)


def test_summary_only_gives_mean_and_spread_of_seeds_already_run(tmp_path: Path) -> None:
    for seed, (acc, cost) in {"0": (0.6, 2.0), "1": (0.8, 4.0)}.items():
        reports = tmp_path / f"seed-{seed}/reports"
        reports.mkdir(parents=True)
        (reports / "metrics.json").write_text(json.dumps(_metrics(acc, cost)))
    done = _run(tmp_path, "0", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "| e3orch | 0.700 ± 0.100 | 3.000 ± 1.000 | 0.250 ± 0.050 |" in lines  # IE 0.3 and 0.2
    assert "| thrifty | 0.750 ± 0.000 | 2.500 ± 0.000 | 0.300 ± 0.000 |" in lines
    assert "| e3orch | 0.350 ± 0.050 | 3.000 ± 1.000 | 0.125 ± 0.025 |" in lines  # the transfer pool
    assert "| 1 | 0.800 / 4.000 / 0.200 vs 0.500 / 2.000 / 0.250 | 0.400 / 4.000 / 0.100 vs - |" in lines
    # the training targets: seed 0 is below 1.16 × thrifty's IE (0.3, within 3 points above it); seed 1
    # has no rule within 3 points; no rule on the transfer pool and no generated pools: not judged
    assert "| 0 | yes | no | n/a | n/a | 1 of 2 |" in lines
    assert "| 1 | yes | yes | n/a | n/a | 2 of 2 |" in lines
    assert lines[-1] == "3 of 4 per-seed targets met."
    assert (tmp_path / "seeds.md").read_text() == done.stdout
    assert not (tmp_path / "seed-0/params.yaml").exists()  # nothing was run


def test_summary_only_names_a_seed_that_has_not_run(tmp_path: Path) -> None:
    (tmp_path / "seed-0/reports").mkdir(parents=True)
    (tmp_path / "seed-0/reports/metrics.json").write_text(json.dumps(_metrics(0.6, 2.0)))
    done = _run(tmp_path, "0", "3")
    assert done.returncode == 2
    assert done.stderr.strip() == f"seeds.sh: no {tmp_path}/seed-3/reports/metrics.json: run seed 3 first"
    assert not (tmp_path / "seeds.md").exists()
