"""Progress off a terminal: plain lines (a live bar would show nothing until it ends)."""

from __future__ import annotations

import re

import pytest

from e3orch import progress


def test_bars_write_plain_lines_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with progress.step_progress("warm start (SFT)") as on_step:
        for step in range(1, 5):
            on_step(step, 4, 0.25)
        on_step.phase("correction round 1")
        on_step(1, 2, 0.5)
    with progress.count_progress("evaluate", 3) as advance:
        advance("a")
        advance("b")
    err = capsys.readouterr().err.splitlines()
    # lines only every LOG_EVERY_S seconds, plus the end of each phase (finished or not)
    assert [re.sub(r" \d+m\d\ds", "", line) for line in err] == [
        "warm start (SFT): 4/4 (100%) loss 0.250", "correction round 1: 1/2 (50%) loss 0.500", "evaluate: 2/3 (66%) b"]

    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    with progress.count_progress("evaluate", 2) as advance:
        advance()
        advance()
    assert [line.split(" ")[1] for line in capsys.readouterr().err.splitlines()] == ["1/2", "2/2"]
