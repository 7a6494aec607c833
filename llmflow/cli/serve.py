"""`llmflow serve`: serve a model over HTTP with streaming (OpenAI routes and MLflow /invocations)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmflow.cli.common import exit_on_llmflow_error
from llmflow.errors import FieldProblem, InvalidParams

if TYPE_CHECKING:
    from llmflow.server import ServerSettings

API_KEY_ENV = "LLMFLOW_API_KEY"

logger = logging.getLogger("llmflow.serve")


def serve(
    model: Annotated[
        str | None,
        typer.Argument(
            help="a model URI (models:/name/1, runs:/<id>/model), a local MLflow model directory, or a "
            "GGUF file; default: the embedded SmolLM2-135M-Instruct",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="interface to bind; 0.0.0.0 exposes the server to the network")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    api_key: Annotated[
        str | None,
        typer.Option(
            help=f"require 'Authorization: Bearer <key>' (also read from ${API_KEY_ENV})",
            envvar=API_KEY_ENV,
            show_default=False,
            show_envvar=True,
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None, typer.Option(help="read the API key from this file", show_default=False)
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(help="the name clients send as 'model'; default: from MODEL", show_default=False),
    ] = None,
    max_queue: Annotated[int, typer.Option(help="requests that may wait for a place; beyond: 429")] = 16,
    max_running: Annotated[
        int | None,
        typer.Option(help="generations at once; default: what the engine supports", show_default=False),
    ] = None,
    timeout: Annotated[float, typer.Option(help="time limit per request in seconds, queue included")] = 600.0,
    max_body_bytes: Annotated[int, typer.Option(help="larger request bodies get 413")] = 8 * 1024 * 1024,
    read_timeout: Annotated[
        float,
        typer.Option(
            help="seconds a client has to send its request head, and then its body; beyond: 408 and "
            "the connection is closed"
        ),
    ] = 30.0,
    max_connections: Annotated[
        int, typer.Option(help="open connections at most; one more is answered 503 and closed")
    ] = 256,
    keep_alive_timeout: Annotated[
        float, typer.Option(help="seconds an idle connection stays open between two requests")
    ] = 5.0,
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="an origin allowed by CORS (repeatable); default: CORS off")
    ] = None,
    shutdown_grace: Annotated[
        float, typer.Option(help="on SIGTERM, seconds running streams may go on before they are ended")
    ] = 10.0,
    parallel: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="generations decoded together in one batch (GGUF models); beyond, requests wait in "
            "the queue; default: from the context size and the cores",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            help="engine (default: guessed; a GGUF model gets llama_cpp_batched, which batches "
            "concurrent requests)",
            show_default=False,
        ),
    ] = None,
    engine_option: Annotated[
        list[str] | None,
        typer.Option(help="engine load option KEY=VALUE, e.g. n_threads=2 (repeatable)"),
    ] = None,
    tracing: Annotated[
        bool | None,
        typer.Option(
            "--tracing/--no-tracing",
            help="record an MLflow trace of every generation (to MLFLOW_TRACKING_URI, the experiment "
            "in MLFLOW_EXPERIMENT_NAME or MLFLOW_EXPERIMENT_ID); default: only when one of those "
            "experiment variables is set",
            show_default=False,
        ),
    ] = None,
    max_n: Annotated[
        int, typer.Option(help="answers one request may ask for at most (OpenAI's n); more is a 400")
    ] = 8,
    reasoning_format: Annotated[
        str,
        typer.Option(
            help="parsed: a reasoning model's thinking (<think>...</think>) is sent as "
            "delta.reasoning_content, apart from the answer; none: it stays in the content"
        ),
    ] = "parsed",
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve MODEL over HTTP with token streaming: /v1/chat/completions, /v1/completions,
    /invocations (with "stream": true), /health, /metrics."""
    from llmflow.server import create_app, load_served
    from llmflow.server.runner import run

    with exit_on_llmflow_error():
        key = _read_api_key(api_key, api_key_file)
        settings = _settings(
            host=host,
            port=port,
            api_key=key,
            model_name=model_name,
            max_queue=max_queue,
            max_running=max_running,
            request_timeout_s=timeout,
            max_body_bytes=max_body_bytes,
            read_timeout_s=read_timeout,
            max_connections=max_connections,
            keep_alive_timeout_s=keep_alive_timeout,
            cors_origins=tuple(cors_origin or ()),
            shutdown_grace_s=shutdown_grace,
            tracing=tracing,
            reasoning_format=reasoning_format,
            max_n=max_n,
        )
        served = load_served(
            model,
            name=model_name,
            engine=engine,
            engine_options=parse_engine_options(engine_option or []),
            parallel=parallel,
        )
        app = create_app(served, settings)
    _warn_if_exposed(host, key)
    where = f"http://{host}:{port}"
    typer.secho(f"serving {served.name!r} on {where} (OpenAI base URL {where}/v1)", err=True)
    run(app, host, port, log_level=log_level)


#: ServerSettings fields whose command-line option is named otherwise
_OPTION_OF_FIELD = {
    "request_timeout_s": "--timeout",
    "read_timeout_s": "--read-timeout",
    "keep_alive_timeout_s": "--keep-alive-timeout",
    "shutdown_grace_s": "--shutdown-grace",
    "cors_origins": "--cors-origin",
}


def _settings(**values: Any) -> ServerSettings:
    """The server's settings, a bad value named by its option (not a pydantic traceback)."""
    from pydantic import ValidationError

    from llmflow.server import ServerSettings

    try:
        return ServerSettings(**values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "settings"
            option = _OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
            problems.append(FieldProblem(option, error["msg"].lower()))
        raise InvalidParams(problems) from None


def _read_api_key(api_key: str | None, api_key_file: Path | None) -> str | None:
    if api_key_file is not None:
        try:
            key = api_key_file.read_text().strip()
        except OSError as exc:
            raise InvalidParams.single("api_key_file", f"cannot be read: {exc.strerror}") from None
        if not key:
            raise InvalidParams.single("api_key_file", "is empty")
        return key
    return api_key or None


def parse_engine_options(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; values are read as JSON when they parse (numbers, true/false), else strings."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidParams.single("engine_option", f"expected KEY=VALUE, got {item!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _warn_if_exposed(host: str, api_key: str | None) -> None:
    if host not in ("127.0.0.1", "localhost", "::1") and api_key is None:
        typer.secho(
            f"warning: bound to {host} without an API key: anyone who can reach this port can use the model "
            f"(set --api-key or ${API_KEY_ENV})",
            err=True,
            fg=typer.colors.YELLOW,
        )


def register(app: typer.Typer) -> None:
    app.command()(serve)
