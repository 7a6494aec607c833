"""`llmflow log`: log a model to MLflow (and optionally register it); print its URI last."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmflow.cli.common import exit_on_llmflow_error, parse_assignments, tracking_store


def log(
    model: Annotated[
        str | None,
        typer.Argument(
            help="a GGUF file, a model directory or hf://ORG/REPO[:QUANT | /file.gguf][@revision] (its "
            "repo, commit and checksums recorded in the model's metadata); default: the embedded "
            "SmolLM2-135M-Instruct",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        str | None, typer.Option(help="inference engine; default: from the model's files")
    ] = None,
    name: Annotated[str, typer.Option(help="the logged model's name")] = "model",
    registered_model_name: Annotated[
        str | None, typer.Option(help="also register it in the model registry under this name")
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI; default: $MLFLOW_TRACKING_URI or MLflow's")
    ] = None,
    experiment: Annotated[str | None, typer.Option(help="experiment name (created if missing)")] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="a default sampling param, KEY=VALUE (repeatable)")
    ] = None,
    engine_option: Annotated[
        list[str] | None, typer.Option(help="an engine load option, KEY=VALUE (repeatable)")
    ] = None,
    system_prompt: Annotated[
        str | None,
        typer.Option(help="default system prompt: the text, or a registry prompt (prompts:/NAME@ALIAS)"),
    ] = None,
    lora: Annotated[
        list[str] | None,
        typer.Option(
            help="a LoRA adapter logged with the model, NAME=PATH: a GGUF adapter file (llama.cpp "
            "engines) or a PEFT adapter directory (transformers) (repeatable)"
        ),
    ] = None,
    chat_template: Annotated[
        Path | None, typer.Option(help="a Jinja2 chat template file; default: the model's own")
    ] = None,
    by_reference: Annotated[
        bool, typer.Option(help="record the weights' local path instead of copying them (this machine only)")
    ] = False,
    tracing: Annotated[
        bool | None,
        typer.Option(
            "--tracing/--no-tracing",
            help="the model records an MLflow trace of every call (or never); default: only when an "
            "MLflow experiment is set where it runs",
            show_default=False,
        ),
    ] = None,
    interface: Annotated[
        str,
        typer.Option(
            help="chunks: {prompt} in, {content} chunks out; responses: an MLflow ResponsesAgent "
            "(OpenAI's Responses format)"
        ),
    ] = "chunks",
) -> None:
    """Log a model to MLflow as a streamable pyfunc model. The last line of output is its URI."""
    import mlflow

    from llmflow.mlflow import log_model
    from llmflow.mlflow.save import model_source

    with exit_on_llmflow_error():
        options: dict[str, Any] = {
            "engine": engine,
            "engine_options": parse_assignments(engine_option, "--engine-option"),
            "default_params": parse_assignments(param, "--param"),
            "system_prompt": system_prompt,
            "by_reference": by_reference,
            "tracing": tracing,
            "interface": interface,
        }
        if lora:
            options["lora"] = _adapters(lora)
        if chat_template is not None:
            options["chat_template"] = chat_template.read_text(encoding="utf-8")
        model_source(model, **options)  # bad arguments fail before MLflow creates anything
        with (
            tracking_store(tracking_uri),
            mlflow.start_run(experiment_id=_experiment_id(experiment) if experiment else None) as run,
        ):
            info = log_model(name, model, registered_model_name=registered_model_name, **options)
        typer.secho(f"run {run.info.run_id}: runs:/{run.info.run_id}/{name}", err=True, dim=True)
        uri = info.model_uri
        if registered_model_name is not None:
            uri = f"models:/{registered_model_name}/{info.registered_model_version}"
    typer.echo(uri)


def _experiment_id(name: str) -> str:
    """The experiment called `name`, made if missing: the run goes there without making it the
    process's active experiment (`mlflow.set_experiment`), which would outlive the command where
    it runs in process, and outrank `MLFLOW_EXPERIMENT_ID` for every later trace and run."""
    import mlflow

    found = mlflow.get_experiment_by_name(name)
    return found.experiment_id if found is not None else mlflow.create_experiment(name)


def _adapters(values: list[str]) -> dict[str, str]:
    adapters: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"expected NAME=PATH, got {item!r}", param_hint="--lora")
        adapters[name] = path
    return adapters


def register(app: typer.Typer) -> None:
    app.command()(log)
