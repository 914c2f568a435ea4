"""Progress bars for long stages (rich, on stderr). Library code takes plain callbacks; this
module turns them into bars at the edges, so nothing is printed per executor call."""

from __future__ import annotations

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


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=Console(stderr=True))


@contextmanager
def step_progress(description: str) -> Iterator[StepBar]:
    """A bar driven by ``on_step(step, total, loss)``; ``on_step.phase(text)`` starts a new phase."""
    with _progress() as progress:
        yield StepBar(progress, progress.add_task(description, total=None, info=""))


class StepBar:
    def __init__(self, progress: Progress, bar: TaskID) -> None:
        self.progress, self.bar = progress, bar

    def __call__(self, step: int, total: int, loss: float) -> None:
        self.progress.update(self.bar, completed=step, total=total, info=f"loss {loss:.3f}")

    def phase(self, description: str) -> None:
        self.progress.update(self.bar, description=description, completed=0, total=None, info="")


@contextmanager
def count_progress(description: str, total: int) -> Iterator[Callable[[str], None]]:
    """A bar advanced by ``advance(info)`` once per unit of work."""
    with _progress() as progress:
        bar = progress.add_task(description, total=total, info="")

        def advance(info: str = "") -> None:
            progress.update(bar, advance=1, info=info)

        yield advance
