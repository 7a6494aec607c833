"""Copying model weights into a model directory, with a progress bar when it takes a while."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: weights at least this large get a progress bar on a terminal
PROGRESS_THRESHOLD_BYTES = 64 * 1024 * 1024
_BUFFER_BYTES = 16 * 1024 * 1024


def weight_files(source: Path) -> list[Path]:
    """The files to copy: the file itself, or every file under a directory (links followed)."""
    if source.is_file():
        return [source]
    return sorted(p for p in source.rglob("*") if p.is_file())


def total_size(source: Path) -> int:
    return sum(p.stat().st_size for p in weight_files(source))


def copy_weights(source: Path, destination: Path, *, progress: bool | None = None) -> None:
    """Copy a weights file or directory to `destination` (which must not exist yet).

    `progress=None` shows a bar on a terminal for large weights; True always, False never.
    """
    files = weight_files(source)
    size = sum(p.stat().st_size for p in files)
    with _progress(f"copying {source.name}", size, progress) as advance:
        for file in files:
            target = destination if file == source else destination / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if advance is None:
                shutil.copyfile(file, target)
            else:
                _copy_with_progress(file, target, advance)


def _copy_with_progress(source: Path, target: Path, advance: Callable[[int], None]) -> None:
    buffer = bytearray(_BUFFER_BYTES)
    view = memoryview(buffer)
    with open(source, "rb") as fin, open(target, "wb") as fout:
        while n := fin.readinto(buffer):
            fout.write(view[:n])
            advance(n)


@contextmanager
def _progress(label: str, size: int, show: bool | None) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr, or None when there is nothing worth showing."""
    from rich.console import Console

    console = Console(stderr=True)
    if show is None:
        show = size >= PROGRESS_THRESHOLD_BYTES and console.is_terminal and not os.environ.get("CI")
    if not show:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(label, total=size)
        yield lambda n: bar.advance(task, n)
