"""A live progress bar per load level (rich, on stderr), with failures counted as they happen."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from llmflow.bench.records import RequestRecord


class RichProgress:
    def __init__(self, console: Console | None = None):
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[tokens]} tokens"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
        )
        self._task: TaskID | None = None
        self._failed = 0
        self._tokens = 0

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start_level(self, label: str, total: int) -> None:
        self._failed = self._tokens = 0
        self._task = self._progress.add_task(label, total=total, failed=0, tokens=0)

    def advance(self, record: RequestRecord) -> None:
        if self._task is None:
            return
        self._failed += 0 if record.ok else 1
        self._tokens += record.usage_output_tokens or len(record.arrivals)
        self._progress.update(self._task, advance=1, failed=self._failed, tokens=self._tokens)

    def end_level(self) -> None:
        self._task = None
