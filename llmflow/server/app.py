"""The FastAPI app: routes, error handlers and middleware around the served models."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.middleware.cors import CORSMiddleware

from llmflow import __version__
from llmflow.server import (
    anthropic,
    embeddings,
    health,
    invocations,
    lora,
    openai,
    playground,
    responses,
    tokens,
)
from llmflow.server.error_answers import EXCEPTION_HANDLERS
from llmflow.server.metrics import ServerMetrics
from llmflow.server.middleware import (
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    ResponseCounterMiddleware,
    TraceContextMiddleware,
)
from llmflow.server.model_config import ModelConfig
from llmflow.server.model_registry import ModelLeases, ModelRegistry
from llmflow.server.response_store import ResponseStore
from llmflow.server.served import ServedModel
from llmflow.server.settings import ServerSettings
from llmflow.server.state import ServerState

logger = logging.getLogger(__name__)

ROUTERS = (
    health.router,
    openai.router,
    responses.router,
    anthropic.router,
    embeddings.router,
    tokens.router,
    lora.router,
    invocations.router,
)


def create_app(served: Any, settings: ServerSettings | None = None) -> FastAPI:
    """An app serving `served`: a `ServedModel`, an `llmflow.LLM`, a loaded MLflow pyfunc model,
    or a list of them and of `ModelConfig`s (several models, each under its name; the first is
    the default)."""
    settings = settings or ServerSettings()
    metrics = ServerMetrics()
    models = ModelRegistry.build(_as_models(served, settings), settings, metrics)
    responses = ResponseStore(
        settings.response_store_max, settings.response_store_bytes, settings.response_store
    )
    state = ServerState(settings, metrics, models, responses=responses)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.ensure_future(models.run_reaper())
        yield
        reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reaper
        await models.shutdown()
        responses.close()

    names = ", ".join(repr(name) for name in models.names)
    app = FastAPI(
        title="llmflow",
        version=__version__,
        description=f"Streaming inference for {names}: OpenAI-compatible routes, MLflow invocations.",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
    )
    app.state.llmflow = state
    for router in ROUTERS:
        app.include_router(router)
        state.known_paths.update(route.path for route in router.routes if isinstance(route, APIRoute))
    for name in models.names:  # counted by its own path
        state.known_paths.add(f"/serving-endpoints/{name}/invocations")
    playground.mount(app, state)  # the chat page at /, public: it asks for the key itself
    _add_middleware(app, state)
    app.openapi = lambda: _openapi(app, state)  # type: ignore[method-assign]
    return app


def _as_models(served: Any, settings: ServerSettings) -> list[ServedModel | ModelConfig]:
    if isinstance(served, ModelConfig | ServedModel | str) or not isinstance(served, Sequence):
        return [_as_model(served, settings)]
    if settings.model_name is not None and len(served) != 1:
        raise ValueError("model_name names a single model; name several models each on its own")
    return [_as_model(item, settings) for item in served]


def _as_model(item: Any, settings: ServerSettings) -> ServedModel | ModelConfig:
    name = settings.model_name
    if isinstance(item, ModelConfig):
        return item.model_copy(update={"name": name}) if name is not None and item.name is None else item
    if isinstance(item, ServedModel):
        return dataclasses.replace(item, name=name) if name else item
    from llmflow.llm import LLM

    if isinstance(item, LLM):
        return ServedModel.from_llm(item, name)
    if hasattr(item, "predict") and hasattr(item, "metadata"):  # a loaded pyfunc model
        return ServedModel.from_pyfunc(item, name or "model")
    raise TypeError(f"cannot serve a {type(item).__name__}: give a ServedModel, an LLM or a pyfunc model")


def _add_middleware(app: FastAPI, state: ServerState) -> None:
    """Added innermost first: trace context, model leases, body limit, API key, CORS, response
    counter (outermost)."""
    settings = state.settings
    app.add_middleware(TraceContextMiddleware)
    app.add_middleware(ModelLeases, registry=state.models)
    app.add_middleware(
        BodyLimitMiddleware, limit=settings.max_body_bytes, read_timeout_s=settings.read_timeout_s
    )
    if settings.api_key is not None:
        app.add_middleware(
            ApiKeyMiddleware,
            api_key=settings.api_key.get_secret_value(),
            public_paths=lambda: state.public_paths,
        )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "X-Api-Key",
                "Anthropic-Version",
                "Anthropic-Beta",
            ],
        )
    app.add_middleware(
        ResponseCounterMiddleware, count=state.metrics.count_response, known_paths=lambda: state.known_paths
    )


def _openapi(app: FastAPI, state: ServerState) -> dict[str, Any]:
    """FastAPI's document, corrected to what the server does: 400 (not 422) for invalid bodies, and
    the bearer-key requirement when the server has a key."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    for operations in schema["paths"].values():  # validation errors are answered 400, not FastAPI's 422
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    for unused in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(unused, None)
    if state.settings.api_key is not None:
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"}
        }
        schema["security"] = [{"bearer": []}]
        for path in state.public_paths:
            for operation in schema["paths"].get(path, {}).values():
                operation["security"] = []
    app.openapi_schema = schema
    return schema
