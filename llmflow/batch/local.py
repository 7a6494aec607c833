"""`llmflow batch` without Spark: the logged model's `predict`, row by row, with a progress bar."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from llmflow.batch.columns import InputColumns
from llmflow.batch.summary import BatchSummary
from llmflow.mlflow.inputs import IMAGES
from llmflow.mlflow.signature import JSON_SCHEMA, RESULT, RESULT_STRUCT
from llmflow.mlflow.struct_result import FINISH_ERROR, RESULT_FIELDS, error_record

if TYPE_CHECKING:
    import pandas as pd

#: the column of parsed answers with --json-schema
VALUE = "value"


def run_local(
    model_uri: str,
    frame: pd.DataFrame,
    columns: InputColumns,
    params: Mapping[str, Any],
    *,
    threads: int | None = None,
    progress: bool = True,
    image_folder: str | None = None,
) -> tuple[pd.DataFrame, BatchSummary]:
    """The input's columns plus the result fields, one row per input row, in input order.
    `image_folder`: where an image column's relative file paths start (the input file's folder)."""
    from llmflow.mlflow import find_llm

    model = load_pyfunc(model_uri, threads)
    named = columns.as_model_input()
    inputs = frame[list(named.values())].set_axis(list(named), axis=1).reset_index(drop=True)
    images = None if columns.image is None else frame[columns.image].reset_index(drop=True)
    call_params = {**params, RESULT: RESULT_STRUCT}
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        with _progress(len(inputs), progress) as advance:
            for i in range(len(inputs)):
                row: pd.DataFrame | dict[str, Any] = inputs.iloc[i : i + 1]
                if images is not None and columns.image is not None:
                    row = with_image(row, images.iloc[i], columns.image, image_folder)
                if isinstance(row, dict):  # the row's image could not be read: its error record
                    records.append(row)
                else:
                    records.extend(model.predict(row, params=call_params))
                advance(records[-1]["completion_tokens"])
    finally:
        llm = find_llm(model)
        if llm is not None:
            llm.close()
    seconds = time.perf_counter() - start
    out = with_results(frame, records, typed=bool(params.get(JSON_SCHEMA)))
    return out, summarize(out, seconds)


def with_image(
    row: pd.DataFrame, cell: Any, column: str, folder: str | None
) -> pd.DataFrame | dict[str, Any]:
    """The one-row input with the cell's image as its `images` (none for an empty cell), or the
    row's error record when the cell holds no readable image (a missing file, not an image)."""
    import pandas as pd

    from llmflow.errors import LlmflowError
    from llmflow.media.values import image_cell

    try:
        data = image_cell(cell, column, folder)
    except LlmflowError as exc:
        return error_record(exc)
    row = row.copy()
    row[IMAGES] = pd.Series([None if data is None else [data]], index=row.index, dtype=object)
    return row


def load_pyfunc(model_uri: str, threads: int | None = None) -> Any:
    """The logged model, its engine on `threads` CPU threads when given (its other engine options
    kept)."""
    from llmflow.load_spec import LoadSpec
    from llmflow.mlflow.model_ref import resolve

    return resolve(model_uri, LoadSpec(threads=threads)).pyfunc


def with_results(frame: pd.DataFrame, records: list[dict[str, Any]], typed: bool = False) -> pd.DataFrame:
    """The input's columns (result-named ones replaced) then the result fields; `typed` (answers
    that follow a JSON Schema): a `value` column with each answer parsed (None for error rows)."""
    import pandas as pd

    results = pd.DataFrame(records, columns=list(RESULT_FIELDS))
    if typed:
        results[VALUE] = [json.loads(r["answer"]) if not r["error"] else None for r in records]
    for name in ("prompt_tokens", "completion_tokens"):
        results[name] = results[name].astype("int64")
    kept = frame.drop(columns=[c for c in (*RESULT_FIELDS, VALUE) if c in frame.columns]).reset_index(
        drop=True
    )
    return pd.concat([kept, results], axis=1)


def summarize(out: pd.DataFrame, seconds: float) -> BatchSummary:
    return BatchSummary(
        rows=len(out),
        errors=int((out["finish_reason"] == FINISH_ERROR).sum()),
        prompt_tokens=int(out["prompt_tokens"].sum()),
        completion_tokens=int(out["completion_tokens"].sum()),
        seconds=seconds,
    )


@contextmanager
def _progress(total: int, show: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr: rows done, time left, output tokens per second."""
    if not show:
        yield lambda _tokens: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("answering"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[rate]}"),
    )
    start = time.perf_counter()
    tokens = 0
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("rows", total=total, rate="")

        def advance(new_tokens: int) -> None:
            nonlocal tokens
            tokens += new_tokens
            rate = tokens / max(time.perf_counter() - start, 1e-9)
            bar.update(task, advance=1, rate=f"{rate:.1f} tok/s")

        yield advance
