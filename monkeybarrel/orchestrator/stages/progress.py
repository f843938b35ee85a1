"""A rich progress bar that can be switched off (tests, non-interactive logs)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _NullBar:
    def advance(self, amount: int = 1, **fields) -> None:
        pass


class _Bar:
    def __init__(self, progress: Progress, task_id) -> None:
        self.progress, self.task_id = progress, task_id

    def advance(self, amount: int = 1, **fields) -> None:
        self.progress.update(self.task_id, advance=amount, **fields)


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[_Bar | _NullBar]:
    """Yield an object with ``advance(n, info=...)``; prints nothing when disabled."""
    if not enabled or total == 0:
        yield _NullBar()
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn(), TextColumn("{task.fields[info]}"))
    with Progress(*columns, transient=False) as progress:
        yield _Bar(progress, progress.add_task(description, total=total, info=""))
