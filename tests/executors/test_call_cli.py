"""``e3orch call`` end to end through ``e3orch.cli.main`` with the tools pool."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from e3orch.cli import main

REPO = Path(__file__).resolve().parents[2]
TOOLS = str(REPO / "configs" / "executors" / "tools.yaml")


def call_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    rc = main(["call", *argv, "--executors", TOOLS, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_calculator_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = call_json(capsys, "calculator", "--instruction", "What is 2**100 + 1/4?")
    assert rc == 0
    assert {"ok", "output", "cost", "latency_s", "error"} <= set(res)
    assert res["ok"] is True and res["error"] is None
    assert res["output"] == "1267650600228229401496703205376.25"
    assert isinstance(res["cost"], float) and res["cost"] > 0


def test_calculator_failure_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = call_json(capsys, "calculator", "--instruction", "__import__('os').system('id')")
    assert rc == 1 and res["ok"] is False and "attribute access" in str(res["error"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_python_with_context_and_fenced_code(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = tmp_path / "task.md"
    code.write_text("Run this:\n```python\nprint(DEPS['s0'].upper(), sum(range(10)))\n```\n")
    rc, res = call_json(capsys, "python", "--instruction-file", str(code), "--context", "s0=hello world")
    assert rc == 0, res
    assert res["ok"] is True and res["output"] == "HELLO WORLD 45"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_python_error_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = call_json(capsys, "python", "--instruction", "print('so far'); 1/0")
    assert rc == 1 and res["ok"] is False
    assert res["output"] == "so far"
    assert "exit code 1" in str(res["error"]) and "ZeroDivisionError" in str(res["error"])


def test_readable_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["call", "search", "--executors", TOOLS, "--instruction", "Who painted the Mona Lisa?"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("search: ok")
    assert "[1] Mona Lisa (" in out


def test_unknown_executor_and_bad_context(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "nope", "--executors", TOOLS, "--instruction", "x"]) == 2
    err = capsys.readouterr().err
    assert "no executor 'nope'" in err and "calculator, python, search" in err
    assert main(["call", "calculator", "--executors", TOOLS, "--instruction", "1", "--context", "oops"]) == 2
    assert "--context expects ID=TEXT" in capsys.readouterr().err
    assert main(["call", "calculator", "--executors", TOOLS, "--instruction-file", "/nonexistent/x.txt"]) == 2
    assert main(["call", "calculator", "--executors", "/nonexistent/pool.yaml", "--instruction", "1"]) == 2
