"""`llmflow batch`: answer every prompt of a file, in this process or on Spark."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from llmflow.batch.models import BatchModel
from llmflow.cli.common import EXIT_BAD_INPUT, exit_on_llmflow_error, parse_assignments, tracking_store
from llmflow.errors import BatchFileError


def batch(
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL",
            help="a model URI (runs:/..., models:/...), a saved model dir, a GGUF file or hf://ORG/REPO[:QUANT]",
        ),
    ],
    input: Annotated[str, typer.Argument(metavar="INPUT", help="prompts: a .parquet, .csv or .jsonl file")],
    output: Annotated[
        str,
        typer.Argument(
            metavar="OUTPUT", help="answers: .parquet, .csv or .jsonl (with --spark: a directory of parts)"
        ),
    ],
    spark: Annotated[
        str | None,
        typer.Option("--spark", metavar="MASTER", help="run on Spark: a master URL, e.g. local[2] or yarn"),
    ] = None,
    prompt_column: Annotated[
        str | None, typer.Option(help="the column of prompts (default: `prompt` and/or `messages`)")
    ] = None,
    image_column: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="a column of one image per row for the user turn: bytes, base64, a data URI, or an "
            "image file's path (relative to INPUT's folder, or absolute); the model must read images",
        ),
    ] = None,
    params: Annotated[
        list[str] | None,
        typer.Option("--params", "-p", help="a model param as k=v, the value JSON or text (repeatable)"),
    ] = None,
    engine_option: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            help="an engine load option for a weights file or Hub model, e.g. mmproj=PROJECTOR.gguf "
            "for a vision model (repeatable; a logged model loads with the options it was logged with)",
        ),
    ] = None,
    partitions: Annotated[
        int | None, typer.Option(min=1, help="Spark partitions (default: 4 per core)")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="engine threads (default: all cores; on Spark, cores // concurrent tasks)"),
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(help="the MLflow tracking URI for runs:/ and models:/ URIs")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="replace OUTPUT if it exists")] = False,
    json_schema: Annotated[
        Path | None,
        typer.Option(
            "--json-schema",
            metavar="SCHEMA.json",
            help="answers follow this JSON Schema; a `value` column holds each parsed answer "
            "(an answer cut at max_tokens is an error row)",
        ),
    ] = None,
) -> None:
    """Answer every row of INPUT and write OUTPUT with answer, finish_reason, prompt_tokens,
    completion_tokens and error columns (a bad row gets finish_reason "error", not a failed job)."""
    from llmflow.batch.files import check_input, check_output

    with (
        exit_on_llmflow_error(),
        _exit_on_mlflow_error(),
        tracking_store(tracking_uri),
        tempfile.TemporaryDirectory() as workdir,
    ):
        model_params = parse_params(params or [])
        if json_schema is not None:
            model_params["json_schema"] = read_schema(json_schema)
        engine_options = parse_assignments(engine_option, "--engine-option")
        check_input(input)
        check_output(output, overwrite=overwrite)
        columns = (prompt_column, image_column)
        job = BatchModel(model, engine_options, Path(workdir))
        if spark is None:
            summary = _run_local(job, input, output, columns, model_params, threads)
        else:
            summary = _run_spark(
                spark, job, input, output, columns, model_params, partitions, threads, overwrite
            )
    typer.secho(summary.line(), err=True, dim=True)
    typer.echo(output)


def parse_params(items: list[str]) -> dict[str, Any]:
    """`k=v` pairs; a value that parses as JSON is taken as JSON (0, 0.7, true, ["a", "b"]).

    Checked here, before any model loads: MLflow would drop a misspelt name with a warning."""
    from llmflow.mlflow.inputs import parse_options
    from llmflow.params import SamplingParams

    parsed = parse_assignments(items, "--params")
    parse_options(parsed, SamplingParams())
    return parsed


def read_schema(path: Path) -> str:
    """The schema file's JSON text; not a JSON object is a `BatchFileError` naming the file."""
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BatchFileError(f"--json-schema {str(path)!r}: not a readable JSON file: {exc}") from None
    if not isinstance(schema, dict):
        raise BatchFileError(f"--json-schema {str(path)!r}: a JSON Schema is a JSON object")
    return json.dumps(schema)


def _run_local(
    job: BatchModel,
    input: str,
    output: str,
    column_names: tuple[str | None, str | None],
    params: dict[str, Any],
    threads: int | None,
) -> Any:
    from llmflow.batch.columns import input_columns
    from llmflow.batch.files import image_folder, read_frame, write_frame
    from llmflow.batch.local import run_local

    frame = read_frame(input)
    columns = input_columns(list(frame.columns), *column_names)
    out, summary = run_local(
        job.uri(), frame, columns, params, threads=threads, image_folder=image_folder(input)
    )
    write_frame(out, output)
    return summary


def _run_spark(
    master: str,
    job: BatchModel,
    input: str,
    output: str,
    column_names: tuple[str | None, str | None],
    params: dict[str, Any],
    partitions: int | None,
    threads: int | None,
    overwrite: bool,
) -> Any:
    from llmflow.batch.spark_job import run_spark_job
    from llmflow.spark.session import start_session
    from llmflow.spark.udf import local_slots

    session = start_session(master)  # a clear error when pyspark or Java is missing
    from pyspark.errors import AnalysisException

    try:
        uri = job.uri(copy_weights=local_slots(master) is None)
        return run_spark_job(
            session,
            uri,
            input,
            output,
            params,
            prompt_column=column_names[0],
            image_column=column_names[1],
            partitions=partitions,
            threads=threads,
            overwrite=overwrite,
        )
    except AnalysisException as exc:  # a path that does not exist, a type the format cannot hold
        raise BatchFileError(str(exc).splitlines()[0]) from None
    finally:
        session.stop()


@contextmanager
def _exit_on_mlflow_error() -> Iterator[None]:
    """MLflow's own refusals (a param of the wrong type, an unknown model URI) as a message."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        typer.secho(f"error: {exc.message}", err=True, fg=typer.colors.RED)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def register(app: typer.Typer) -> None:
    app.command()(batch)
