"""What the commands share: turning llmflow errors into exit codes, printing streams, and pointing
MLflow at a tracking store for one command."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from llmflow.errors import InvalidParams, LlmflowError
from llmflow.observability.timings import RequestTimings
from llmflow.types import Chunk, FinishReason

EXIT_BAD_INPUT = 2


def parse_assignments(items: list[str] | None, option: str) -> dict[str, Any]:
    """`KEY=VALUE` options (`--engine-option`, `--param`, `--params`) as a dict: a VALUE that
    parses as JSON (numbers, true, null, lists) is decoded, any other is text. Checked before
    any model loads; a malformed one is an `InvalidParams` naming the option."""
    parsed: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidParams.single(option, f"expected KEY=VALUE, got {item!r} (write name=value)")
        try:
            parsed[key] = json.loads(raw)
        except ValueError:
            parsed[key] = raw
    return parsed


@contextmanager
def exit_on_llmflow_error() -> Iterator[None]:
    """The one place where llmflow errors (and MLflow's, once MLflow is in use) become a message
    on stderr and an exit code."""
    try:
        yield
    except LlmflowError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except Exception as exc:
        mlflow_exceptions = sys.modules.get("mlflow.exceptions")  # never imported just for this
        if mlflow_exceptions is None or not isinstance(exc, mlflow_exceptions.MlflowException):
            raise
        typer.secho(f"error: {exc.message}", err=True, fg=typer.colors.RED)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def print_stream(
    chunks: Iterator[Chunk], *, separator: str = ""
) -> tuple[str, FinishReason | None, RequestTimings]:
    """Write text chunks to stdout as they arrive (with `separator` between chunks, like the
    seed's `|`); return the answer, its finish reason and its timings."""
    timings = RequestTimings()
    parts: list[str] = []
    finish = None
    for chunk in chunks:
        if chunk.is_final:
            finish = chunk.finish_reason
            timings.finish(finish.value if finish else "stop", chunk.usage)
            break
        timings.token()
        parts.append(chunk.text)
        sys.stdout.write(chunk.text + separator)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return "".join(parts), finish, timings


def show_hub_progress() -> None:
    """Hub downloads report on stderr: huggingface_hub's bar on a terminal, and llmflow's lines
    (which file, how far; the only progress where stderr is a log) whatever the command."""
    logger = logging.getLogger("llmflow.hub")
    if logger.handlers:
        return
    logger.addHandler(_StderrLines())
    logger.setLevel(logging.INFO)


class _StderrLines(logging.Handler):
    """Each message as a line on the stderr of the moment (a test runner swaps it per command)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(record.getMessage() + "\n")
        sys.stderr.flush()


@contextmanager
def tracking_store(uri: str | None) -> Iterator[None]:
    """MLflow's tracking store is `uri` (when given) for the block, then what it was before.
    `mlflow.set_tracking_uri` is process-wide and exports `MLFLOW_TRACKING_URI` to child
    processes, so a command run in process (a notebook, a test) would otherwise leave every later
    run, model URI and trace pointing at its store."""
    if not uri:
        yield
        return
    import mlflow

    before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)
