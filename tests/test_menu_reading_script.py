"""scripts/menu_reading.py: a policy's answer probabilities for one plan slot under menus that differ in one place."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from conftest import load_script, write_tiny_params


def _script():  # type: ignore[no-untyped-def]
    return load_script("menu_reading")


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """A fresh (untrained) default policy per prompt style, made by init-policy: style → (params, policy)."""
    from e3orch.cli import main

    out = {}
    for style in ("per_part_tiers", "per_part_tier_answers"):
        root = tmp_path_factory.mktemp(style)
        params = write_tiny_params(root, policy={"prompt": style})
        assert main(["prepare", "--params", str(params)]) == 0
        assert main(["init-policy", "--params", str(params), "--out", str(root / "init")]) == 0
        out[style] = (params, root / "init")
    return out


def test_each_rank_is_scored_as_the_policy_writes_its_answers(policies: dict[str, tuple[Path, Path]]) -> None:
    from e3orch.config import load_params
    from e3orch.policy.backends.base import backend_from_params

    script = _script()
    q = script.question("code", "hard", script.MENUS["A"])
    for style, written in (("per_part_tiers", ["S1 | #1 | -", "S1 | #2 | -", "S1 | #3 | -"]),
                           ("per_part_tier_answers", ["S1 | mid #1 | -", "S1 | mid #2 | -", "S1 | premium #3 | -"])):
        params, policy = policies[style]
        backend = backend_from_params(load_params(params).policy, policy)
        probs = script.rank_probabilities(backend, style, q)
        expected = [math.exp(sum(lp)) for lp in backend.score([q] * 3, written)]
        assert probs == pytest.approx(expected, rel=1e-9, abs=0)
        assert 0.0 < sum(probs) <= 1.0 + 1e-9


def test_it_prints_one_row_per_policy_in_its_own_style(policies: dict[str, tuple[Path, Path]],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    params, plain = policies["per_part_tiers"]
    _, tiered = policies["per_part_tier_answers"]
    assert _script().main([str(plain), str(tiered), "--params", str(params), "--skill", "reason"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("P(#1) P(#2) P(#3), a hard reason part's first attempt; menus: A #1 good mid")
    for line, path in zip(out[1:], (plain, tiered)):
        m = re.fullmatch(rf"{re.escape(str(path))}: A (.+)   B (.+)   C (.+)   D (.+)   E (.+)   F (.+)", line)
        assert m, line
        assert all(0.0 <= float(p) <= 1.0 for cell in m.groups() for p in cell.split())
    assert len(out) == 3


def test_bad_input_is_a_one_line_error(policies: dict[str, tuple[Path, Path]], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    params, policy = policies["per_part_tiers"]
    assert _script().main([str(policy), "--params", str(params), "--skill", "cooking"]) == 2
    assert capsys.readouterr().err.strip() == "menu_reading: --skill 'cooking': one of retrieve, compute, code, reason"
    assert _script().main([str(tmp_path), "--params", str(params)]) == 2
    assert capsys.readouterr().err.strip() == f"menu_reading: {tmp_path}: not a policy checkpoint (no config.json)"
