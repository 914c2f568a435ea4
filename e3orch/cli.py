"""The ``e3orch`` command line: one subcommand per module under :mod:`e3orch.commands`.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules are
imported only when their command runs, so ``e3orch --help`` stays fast and heavy dependencies
(torch, prefect, mlflow) load only where used. Every expected failure (bad input, missing file,
bad config) is a :class:`UserError`-like exception turned into one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("e3orch.commands.prepare", "generate/load task tables into data/ (Parquet)"),
    "episode": ("e3orch.commands.episode", "run one task with an orchestrator and print its trace"),
    "call": ("e3orch.commands.call", "run one executor on one subtask"),
    "evaluate": ("e3orch.commands.evaluate", "evaluate orchestrators on a split and write metrics.json"),
    "grade": ("e3orch.commands.grade", "grade {task_id, answer} JSONL lines with a benchmark's grader"),
    "bench": ("e3orch.commands.bench", "benchmarks: engine | rollout | train | routing | headroom"),
    "init-policy": ("e3orch.commands.init_policy", "create the small default policy model (tokenizer + config)"),
    "rollout": ("e3orch.commands.rollout", "tree-structured rollouts → decision-node Parquet"),
    "score": ("e3orch.commands.score", "score decision nodes: rewards and advantages"),
    "warmstart": ("e3orch.commands.warmstart", "supervised warm start from hand-written orchestrators"),
    "train": ("e3orch.commands.train", "RL training rounds → models/policy/"),
    "evaluate-all": ("e3orch.commands.evaluate_all", "the evaluate stage: every system on the training, transfer and generated pools → reports/"),
}

# Exceptions that mean "the user gave bad input": one line, exit 2, no traceback.
# OSError covers missing files, permissions, unreachable servers and offline model hubs.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, OSError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="e3orch", description="E³-Orch: learned agentic orchestration")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse only the command name first, then let the command's own parser handle the rest.
    top, rest = parser.parse_known_args(argv)
    if not top.command:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.DEBUG if top.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    module_name, help_text = COMMANDS[top.command]
    module = importlib.import_module(module_name)
    sub = argparse.ArgumentParser(prog=f"e3orch {top.command}", description=help_text)
    module.add_arguments(sub)
    args = sub.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except USER_ERRORS as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"e3orch {top.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"e3orch {top.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
