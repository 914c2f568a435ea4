"""Progress for long stages (rich, on stderr). Library code takes plain callbacks; this module
turns them into bars at the edges, so nothing is printed per executor call.

On a terminal that is a live bar. When stderr is a file or a pipe (``nohup``, CI logs, ``dvc
repro`` under a scheduler) a live bar shows nothing until it ends, so there each bar writes a
plain line instead — ``warm start (SFT): 420/2166 (19%) 1m32s loss 0.412`` — at most every
``LOG_EVERY_S`` seconds, and once more when it finishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG_EVERY_S = 30.0


def _progress() -> Progress:
    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console,
                    disable=not console.is_terminal)


class _Lines:
    """The plain-line stand-in for a bar when stderr is not a terminal."""

    def __init__(self, progress: Progress, description: str) -> None:
        self.console = progress.console
        self.active = progress.disable
        self.description = description
        self.start = self.last = time.monotonic()
        self.state: tuple[int, int | None, str] | None = None

    def restart(self, description: str) -> None:
        self.flush()
        self.description, self.state = description, None
        self.start = self.last = time.monotonic()

    def update(self, done: int, total: int | None, info: str) -> None:
        if not self.active:
            return
        self.state = (done, total, info)
        now = time.monotonic()
        if now - self.last >= LOG_EVERY_S or (total is not None and done >= total):
            self.flush()

    def flush(self) -> None:
        if not self.active or self.state is None:
            return
        done, total, info = self.state
        elapsed = int(time.monotonic() - self.start)
        count = f"{done}/{total} ({100 * done // max(1, total)}%)" if total else f"{done}"
        self.console.print(f"{self.description}: {count} {elapsed // 60}m{elapsed % 60:02d}s {info}".rstrip(),
                           markup=False, highlight=False, soft_wrap=True)
        self.last = time.monotonic()
        self.state = None


@contextmanager
def step_progress(description: str) -> Iterator[StepBar]:
    """A bar driven by ``on_step(step, total, loss)``; ``on_step.phase(text)`` starts a new phase."""
    with _progress() as progress:
        bar = StepBar(progress, progress.add_task(description, total=None, info=""), description)
        try:
            yield bar
        finally:
            bar.lines.flush()


class StepBar:
    def __init__(self, progress: Progress, bar: TaskID, description: str = "") -> None:
        self.progress, self.bar = progress, bar
        self.lines = _Lines(progress, description)

    def __call__(self, step: int, total: int, loss: float) -> None:
        self.progress.update(self.bar, completed=step, total=total, info=f"loss {loss:.3f}")
        self.lines.update(step, total, f"loss {loss:.3f}")

    def phase(self, description: str) -> None:
        self.progress.update(self.bar, description=description, completed=0, total=None, info="")
        self.lines.restart(description)


@contextmanager
def count_progress(description: str, total: int) -> Iterator[Callable[[str], None]]:
    """A bar advanced by ``advance(info)`` once per unit of work."""
    with _progress() as progress:
        bar = progress.add_task(description, total=total, info="")
        lines = _Lines(progress, description)
        done = 0

        def advance(info: str = "") -> None:
            nonlocal done
            done += 1
            progress.update(bar, advance=1, info=info)
            lines.update(done, total, info)

        try:
            yield advance
        finally:
            lines.flush()
