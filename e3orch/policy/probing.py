"""What the reading probes share (``scripts/menu_reading.py``, ``scripts/confidence_reading.py``):
their command line — policy folders, ``--params``, the part's ``--skill`` and ``--difficulty`` —
its one-line errors, and each policy's backend prompted in the style it was trained with."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e3orch.executors.base import SKILLS
from e3orch.orchestration.reading import DIFFICULTY_NAMES as DIFFICULTIES


class ProbeError(Exception):
    """A probe's input it cannot use; the message is the whole one-line error."""


def probe_args(doc: str, argv: list[str] | None, *, skill: str, difficulty: str) -> argparse.Namespace:
    """The probe's arguments (``doc``'s first paragraph is its description); :class:`ProbeError`
    names a skill or difficulty that is not one, or a folder that is not a policy checkpoint."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("policies", nargs="+", help="policy checkpoint folders (models/warmstart, models/policy)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--skill", default=skill, help=f"one of {', '.join(SKILLS)} (default {skill})")
    ap.add_argument("--difficulty", default=difficulty, help=f"one of {', '.join(DIFFICULTIES)} (default {difficulty})")
    args = ap.parse_args(argv)
    for flag, value, allowed in (("--skill", args.skill, SKILLS), ("--difficulty", args.difficulty, DIFFICULTIES)):
        if value not in allowed:
            raise ProbeError(f"{flag} {value!r}: one of {', '.join(allowed)}")
    missing = [p for p in args.policies if not (Path(p) / "config.json").is_file()]
    if missing:
        raise ProbeError(f"{missing[0]}: not a policy checkpoint (no config.json)")
    return args


def probe_backends(args: argparse.Namespace, styles: tuple[str, ...], why: str) -> Iterator[tuple[str, Any, str]]:
    """(folder, backend, prompt style) of each of ``args.policies``, one at a time; :class:`ProbeError`
    for a policy trained with a prompt style not among ``styles`` (``why``: what such a style does instead)."""
    from e3orch.config import load_params
    from e3orch.policy.backends.base import backend_from_params
    from e3orch.policy.prompts import policy_prompt_style

    params = load_params(args.params)
    for path in args.policies:
        backend = backend_from_params(params.policy, path)
        style = policy_prompt_style(backend, params.policy.prompt)
        if style not in styles:
            raise ProbeError(f"{path}: prompt style {style!r} {why}")
        yield path, backend, style


def run_probe(name: str, body: Any) -> int:
    """``body()``'s exit code, or 2 with ``<name>: <message>`` on stderr for a :class:`ProbeError`."""
    try:
        return int(body())
    except ProbeError as e:
        sys.stderr.write(f"{name}: {e}\n")
        return 2
