"""`llmflow serve`: serve models over HTTP with streaming (OpenAI routes and MLflow /invocations)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmflow.cli.common import exit_on_llmflow_error, parse_assignments
from llmflow.errors import FieldProblem, InvalidParams

if TYPE_CHECKING:
    from llmflow.ray.scaling import Scaling
    from llmflow.server import ServerSettings
    from llmflow.server.model_config import ModelConfig

API_KEY_ENV = "LLMFLOW_API_KEY"

logger = logging.getLogger("llmflow.serve")


def serve(
    model: Annotated[
        list[str] | None,
        typer.Argument(
            help="a model URI (models:/name/1, runs:/<id>/model), a local MLflow model directory, a GGUF "
            "file, or a Hugging Face Hub model hf://ORG/REPO[:QUANT | /file.gguf][@revision] (downloaded "
            "before the server starts); several: each is served under its name; default: the embedded "
            "SmolLM2-135M-Instruct",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="a YAML or TOML file with a list 'models' (name, model, engine, engine_options, parallel, "
            "threads, max_running, max_queue), instead of MODEL arguments",
            show_default=False,
        ),
    ] = None,
    lazy: Annotated[
        bool, typer.Option("--lazy", help="load each model at its first request instead of at start")
    ] = False,
    max_loaded: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="models loaded at once at most; the least recently used idle one is unloaded",
            show_default=False,
        ),
    ] = None,
    idle_unload: Annotated[
        float | None,
        typer.Option(
            help="unload a model after this many seconds without a request (it loads again when asked)",
            show_default=False,
        ),
    ] = None,
    max_memory: Annotated[
        str | None,
        typer.Option(
            help="memory the loaded models may take together, e.g. 8GiB, 512MiB or 16GB (GB = 10^9 "
            "bytes, GiB = 2^30), counted by each model's estimate (weights and KV cache); the least "
            "recently used idle ones are unloaded to stay within it",
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
            help=f"require 'Authorization: Bearer <key>' or 'x-api-key: <key>' (also read from "
            f"${API_KEY_ENV})",
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
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="CPU threads of each model's engine", show_default=False),
    ] = None,
    prompt_cache: Annotated[
        bool | None,
        typer.Option(
            "--prompt-cache/--no-prompt-cache",
            help="keep each conversation's KV state across requests and reuse it to the token "
            "(llama.cpp engines; default on); off: only whole prompt chunks, the same numbers every time",
            show_default=False,
        ),
    ] = None,
    prompt_cache_ram: Annotated[
        str | None,
        typer.Option(
            help="host-memory budget for conversations saved beyond the engine's sequences, e.g. 2GiB "
            "(0 = off; default 1GiB)",
            show_default=False,
        ),
    ] = None,
    prompt_cache_dir: Annotated[
        Path | None,
        typer.Option(help="a directory where saved conversations outlive a restart", show_default=False),
    ] = None,
    prompt_cache_disk: Annotated[
        str | None,
        typer.Option(help="the disk tier's budget, e.g. 10GiB (default 4GiB)", show_default=False),
    ] = None,
    system_prompt: Annotated[
        str | None,
        typer.Option(
            help="each model's default system prompt: the text, or a prompt of MLflow's prompt registry "
            "(prompts:/NAME@ALIAS, prompts:/NAME/VERSION), read at load and re-read when the alias moves",
            show_default=False,
        ),
    ] = None,
    prompt_refresh: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            max=86400,
            help="seconds between re-reads of a registry prompt's alias (default 30)",
            show_default=False,
        ),
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
    response_store: Annotated[
        Path | None,
        typer.Option(
            help="a sqlite file that keeps /v1/responses' stored responses (store, previous_response_id, "
            "GET /v1/responses/{id}) across restarts; default: kept in memory only",
            show_default=False,
        ),
    ] = None,
    response_store_max: Annotated[
        int, typer.Option(min=1, help="stored responses kept at most; beyond, the least recently used go")
    ] = 1024,
    response_store_bytes: Annotated[
        str,
        typer.Option(help="size the stored responses may take together (their JSON), e.g. 64MiB or 1GB"),
    ] = "64MiB",
    allow_image_urls: Annotated[
        list[str] | None,
        typer.Option(
            metavar="HOST[,HOST...]",
            help="fetch http(s) image URLs from these hosts (every hop's address checked: never a "
            "private, loopback, link-local or reserved one); default: images come inline only",
            show_default=False,
        ),
    ] = None,
    allow_image_networks: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CIDR[,CIDR...]",
            help="private or reserved networks that image URLs may reach after all (e.g. 127.0.0.0/8 "
            "for an image server on this machine)",
            show_default=False,
        ),
    ] = None,
    image_url_timeout: Annotated[
        float, typer.Option(help="seconds to fetch one image URL, redirects included")
    ] = 10.0,
    max_image_bytes: Annotated[
        str, typer.Option(help="size one image may take (inline or fetched), e.g. 20MiB")
    ] = "20MiB",
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    switch_interval: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            help="milliseconds a Python thread may hold the GIL while another waits for it "
            "(sys.setswitchinterval); a batching engine's decode thread waits up to this long after "
            "each step while the event loop streams tokens; default: Python's own (5 ms)",
            show_default=False,
        ),
    ] = None,
    on_ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="serve on Ray Serve: model replicas behind Ray's HTTP proxy, each running this "
            "server's routes (needs the 'ray' extra)",
        ),
    ] = False,
    replicas: Annotated[
        int | None, typer.Option(min=1, help="with --ray: model replicas (default 1)", show_default=False)
    ] = None,
    autoscale: Annotated[
        str | None,
        typer.Option(
            help="with --ray: MIN:MAX replicas, added and removed by Ray Serve on requests in progress",
            show_default=False,
        ),
    ] = None,
    target_ongoing_requests: Annotated[
        float, typer.Option(help="with --autoscale: requests in progress per replica to aim at")
    ] = 2.0,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="with --ray: the Ray cluster to join (default: the one running here, else a new local one)",
            show_default=False,
        ),
    ] = None,
    cpus_per_replica: Annotated[
        float | None,
        typer.Option(help="with --ray: CPUs per replica (default: --threads, else 1)", show_default=False),
    ] = None,
    gpus_per_replica: Annotated[float, typer.Option(help="with --ray: GPUs per replica")] = 0.0,
    ray_metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="with --ray: each replica's /metrics also on this port + its rank on its node, for "
            "Prometheus to scrape every replica",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve MODEL (or several) over HTTP with token streaming: /v1/chat/completions,
    /v1/completions, /invocations (with "stream": true), /health, /metrics."""
    from llmflow.server import create_app
    from llmflow.server.uvicorn_server import run

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
            lazy=lazy,
            max_loaded=max_loaded,
            idle_unload_s=idle_unload,
            max_memory=_size_option("--max-memory", max_memory),
            response_store=None if response_store is None else str(response_store),
            response_store_max=response_store_max,
            response_store_bytes=_size_option("--response-store-bytes", response_store_bytes),
            allow_image_urls=tuple(allow_image_urls or ()),
            allow_image_networks=tuple(allow_image_networks or ()),
            image_url_timeout_s=image_url_timeout,
            max_image_bytes=_size_option("--max-image-bytes", max_image_bytes),
        )
        defaults = {
            "engine": engine,
            "engine_options": {
                **prompt_cache_options(prompt_cache, prompt_cache_ram, prompt_cache_dir, prompt_cache_disk),
                **parse_assignments(engine_option, "--engine-option"),
            },
            "parallel": parallel,
            "threads": threads,
            "system_prompt": system_prompt,
            "prompt_refresh_s": prompt_refresh,
        }
        configs = model_configs(model or [], config, model_name, defaults)
        _download_hub_models(configs)
        ray_options = {
            "replicas": replicas,
            "autoscale": autoscale,
            "ray_address": ray_address,
            "cpus_per_replica": cpus_per_replica,
            "ray_metrics_port": ray_metrics_port,
        }
        if on_ray:
            from llmflow.ray.launch import serve_on_ray

            scaling = _scaling(
                replicas, autoscale, target_ongoing_requests, cpus_per_replica, gpus_per_replica
            )
            _warn_if_exposed(host, key)
            announce = lambda line: typer.secho(line, err=True)  # noqa: E731
            serve_on_ray(configs, settings, scaling, ray_address, announce, ray_metrics_port)
            return
        for option, value in ray_options.items():
            if value is not None:
                raise InvalidParams.single(option.replace("_", "-"), "needs --ray")
        app = create_app(configs, settings)
    _warn_if_exposed(host, key)
    where = f"http://{host}:{port}"
    names = ", ".join(repr(name) for name in app.state.llmflow.models.names)
    typer.secho(f"serving {names} on {where} (OpenAI base URL {where}/v1)", err=True)
    run(app, host, port, log_level=log_level, switch_interval_ms=switch_interval)


def model_configs(
    models: list[str], config: Path | None, model_name: str | None, defaults: dict[str, Any]
) -> list[ModelConfig]:
    """One config per model to serve, from MODEL arguments or the config file; the command line's
    engine, engine options, parallel and threads apply where a model's entry does not set them.
    Two models with one name are refused before any is loaded."""
    from llmflow.server.model_config import ModelConfig, check_unique, read_config_file

    if config is not None and models:
        raise InvalidParams.single("config", "give MODEL arguments or --config, not both")
    if model_name is not None and (config is not None or len(models) > 1):
        raise InvalidParams.single("model_name", "names a single MODEL; name several in a config file")
    if config is not None:
        entries = [_with_defaults(entry, defaults) for entry in read_config_file(config)]
    else:
        entries = [ModelConfig(model=ref, name=model_name, **defaults) for ref in (models or [None])]
    check_unique(entry.expected_name() for entry in entries)
    return entries


def _download_hub_models(configs: list[ModelConfig]) -> None:
    """Hub models are downloaded now, before the port is bound (and before --lazy defers any
    load), saying so: a first download can take long, and a server should not look up and dead."""
    from llmflow.cli.pull import download_all

    download_all((entry.model for entry in configs), lambda line: typer.secho(line, err=True))


def _with_defaults(entry: ModelConfig, defaults: dict[str, Any]) -> ModelConfig:
    update = {key: value for key, value in defaults.items() if value is not None and key != "engine_options"}
    update = {key: value for key, value in update.items() if getattr(entry, key) is None}
    update["engine_options"] = {**defaults["engine_options"], **entry.engine_options}
    return entry.model_copy(update=update)


#: ServerSettings fields whose command-line option is named otherwise
_OPTION_OF_FIELD = {
    "request_timeout_s": "--timeout",
    "read_timeout_s": "--read-timeout",
    "keep_alive_timeout_s": "--keep-alive-timeout",
    "shutdown_grace_s": "--shutdown-grace",
    "cors_origins": "--cors-origin",
    "idle_unload_s": "--idle-unload",
    "image_url_timeout_s": "--image-url-timeout",
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


def _scaling(
    replicas: int | None, autoscale: str | None, target: float, cpus: float | None, gpus: float
) -> Scaling:
    from pydantic import ValidationError

    from llmflow.ray.scaling import Scaling, parse_autoscale

    if replicas is not None and autoscale is not None:
        raise InvalidParams.single("replicas", "give --replicas or --autoscale, not both")
    low, high = parse_autoscale(autoscale) if autoscale is not None else (None, None)
    try:
        return Scaling(
            replicas=replicas,
            min_replicas=low,
            max_replicas=high,
            target_ongoing_requests=target,
            cpus_per_replica=cpus,
            gpus_per_replica=gpus,
        )
    except ValidationError as exc:
        raise InvalidParams.single("autoscale", exc.errors()[0]["msg"].lower()) from None


def prompt_cache_options(
    enabled: bool | None, ram: str | None, directory: Path | None, disk: str | None
) -> dict[str, Any]:
    """The prompt-cache flags as the llama.cpp engines' options (only those given)."""
    options: dict[str, Any] = {}
    if enabled is not None:
        options["prompt_cache"] = enabled
    ram_bytes = 0 if ram is not None and ram.strip() == "0" else _size_option("--prompt-cache-ram", ram)
    if ram_bytes is not None:
        options["prompt_cache_ram_mib"] = ram_bytes >> 20
    if directory is not None:
        options["prompt_cache_dir"] = str(directory)
    disk_bytes = _size_option("--prompt-cache-disk", disk)
    if disk_bytes is not None:
        options["prompt_cache_disk_mib"] = disk_bytes >> 20
    return options


def _size_option(option: str, value: str | None) -> int | None:
    """A size option's bytes (see `server.memory.parse_size`), a bad one named by its option."""
    if value is None:
        return None
    from llmflow.server.memory import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise InvalidParams.single(option, str(exc)) from None


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
