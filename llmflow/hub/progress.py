"""Download progress: huggingface_hub's own bar on a terminal, log lines everywhere else (a
server's log, CI), every tenth of a file and at its end, so a long download shows it is alive."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

logger = logging.getLogger("llmflow.hub")

#: a line at least this often (seconds), whatever the share downloaded since the last one
LINE_INTERVAL_S = 30.0


class ProgressLines:
    """What huggingface_hub's downloader takes as its `tqdm_class`: it only calls `update` (a
    negative one after a resumed download that the server restarted) and closes it."""

    #: the file's name in log lines (huggingface_hub's `desc` is a shortened URL)
    name: str | None = None

    def __init__(self, *, total: int | None = None, initial: int = 0, desc: str | None = None, **_: Any):
        self.label = self.name or desc or "file"
        self.total = total
        self.n = initial
        self._start = time.monotonic()
        self._last_line = self._start
        self._last_tenth = self._tenth()
        if initial:
            logger.info("resuming %s at %s", self.label, _size(initial))

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.total and self.n >= self.total:
            return  # `close` says it is done
        now = time.monotonic()
        tenth = self._tenth()
        if tenth > self._last_tenth or now - self._last_line >= LINE_INTERVAL_S:
            self._last_tenth, self._last_line = tenth, now
            of = f" of {_size(self.total)} ({100 * self.n // self.total}%)" if self.total else ""
            logger.info("downloading %s: %s%s", self.label, _size(self.n), of)

    def close(self) -> None:
        seconds = time.monotonic() - self._start
        logger.info("downloaded %s: %s in %.1f s", self.label, _size(self.n), seconds)

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tenth(self) -> int:
        return 10 * self.n // self.total if self.total else 0


def progress_class(name: str, show_bar: bool | None = None) -> type[ProgressLines] | None:
    """The progress reporter for downloading the file `name`: None (huggingface_hub's bar) on a
    terminal, else log lines. `show_bar` decides instead of the terminal when given."""
    if show_bar is None:
        show_bar = sys.stderr.isatty()
    return None if show_bar else type("ProgressLines", (ProgressLines,), {"name": name})


def _size(n: int | None) -> str:
    return f"{(n or 0) / 1e6:.1f} MB"
