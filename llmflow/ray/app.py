"""The Ray Serve application: an ingress deployment (HTTP in, streams out) in front of a model
deployment whose replicas each run llmflow's own app. Ray's own LLM serving has the same shape
(an OpenAI ingress calling model servers through deployment handles); here the model servers
are whole llmflow servers, so every route, limit and error is the one `llmflow serve` has.

`build` is the entry point for `serve run` / `serve deploy` configs; `application` for Python.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from llmflow.ray.ingress import Ingress
from llmflow.ray.replica import ModelReplica
from llmflow.ray.scaling import Scaling
from llmflow.server.model_config import ModelConfig, check_unique
from llmflow.server.settings import ServerSettings

#: the deployments' names, as `serve status` lists them
INGRESS_NAME = "llmflow-ingress"
MODEL_NAME = "llmflow-model"
#: Ray's own cap on requests in a replica, set out of the way: Ray would hold the requests over
#: it in its router's queue, where no 429 is answered; each replica's admission (`--max-running`,
#: `--max-queue`) is the limit, as under `llmflow serve`, and Ray's router still sends each
#: request to the less loaded of two replicas
ONGOING_UNCAPPED = 100_000
#: environment a replica needs from the process that built the app (where the models are)
_FORWARDED_ENV = ("MLFLOW_", "LLMFLOW_", "DATABRICKS_")


class RayAppArgs(BaseModel):
    """Arguments of `build`, as a `serve run` command line (`model=... replicas=2`) or the `args`
    of a `serve deploy` config give them."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None, description="one MODEL, as for `llmflow serve`; default: the embedded model"
    )
    models: list[ModelConfig] | None = Field(None, description="several models, as in a --config file")
    engine: str | None = None
    threads: int | None = Field(None, ge=1)
    parallel: int | None = Field(None, ge=1)
    replicas: int | None = Field(None, ge=1)
    min_replicas: int | None = Field(None, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    scaling: Scaling | None = Field(None, description="all scaling options (instead of replicas, ...)")
    server: ServerSettings = Field(default_factory=ServerSettings, description="as `llmflow serve`'s options")
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="each replica's /metrics on this port + its rank on the node"
    )


def build(args: dict[str, Any] | RayAppArgs) -> Any:
    """A Ray Serve application from `serve run llmflow.ray:build model=... replicas=2` or a
    config file's `import_path: llmflow.ray:build` and `args`."""
    args = args if isinstance(args, RayAppArgs) else RayAppArgs.model_validate(args)
    if args.models is not None and args.model is not None:
        raise ValueError("give model or models, not both")
    defaults = {"engine": args.engine, "threads": args.threads, "parallel": args.parallel}
    models = args.models or [ModelConfig(model=args.model, **defaults)]
    scaling = args.scaling or Scaling(
        replicas=args.replicas, min_replicas=args.min_replicas, max_replicas=args.max_replicas
    )
    return application(models, args.server, scaling, args.metrics_port)


def application(
    models: list[ModelConfig], settings: ServerSettings, scaling: Scaling, metrics_port: int | None = None
) -> Any:
    """The bound application: the ingress, handed a handle to the model deployment."""
    from ray import serve

    check_unique(model.expected_name() for model in models)
    models = [_portable(model) for model in models]
    threads = max((model.threads or 0 for model in models), default=0) or None
    model_options = scaling.deployment_options(threads)
    model_options["ray_actor_options"]["runtime_env"] = {"env_vars": _forwarded_env()}
    model_deployment = serve.deployment(ModelReplica).options(
        name=MODEL_NAME,
        max_ongoing_requests=ONGOING_UNCAPPED,
        graceful_shutdown_timeout_s=settings.shutdown_grace_s + 5,
        **model_options,
    )
    ingress_deployment = serve.deployment(serve.ingress()(IngressDeployment)).options(
        name=INGRESS_NAME,
        num_replicas=scaling.ingress_replicas,
        max_ongoing_requests=ONGOING_UNCAPPED,
        ray_actor_options={"num_cpus": 0},
    )
    return ingress_deployment.bind(
        model_deployment.bind(models, settings, metrics_port), settings.max_body_bytes
    )


class IngressDeployment:
    """The ingress replica: its ASGI app is built on the replica from the model handle."""

    def __init__(self, replicas: Any, max_body_bytes: int) -> None:
        self._replicas = replicas
        self._max_body_bytes = max_body_bytes

    def __serve_build_asgi_app__(self) -> Ingress:
        return Ingress(self._replicas, self._max_body_bytes)


def _portable(model: ModelConfig) -> ModelConfig:
    """A local weights file or model directory, made absolute: replicas start elsewhere."""
    if model.model is None:
        return model
    path = Path(model.model).expanduser()
    return model.model_copy(update={"model": str(path.resolve())}) if path.exists() else model


def _forwarded_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name.startswith(_FORWARDED_ENV)}
