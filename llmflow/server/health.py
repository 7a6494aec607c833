"""Liveness, version and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from llmflow import __version__
from llmflow.server.metrics import CONTENT_TYPE
from llmflow.server.schemas import error_responses
from llmflow.server.state import get_state

router = APIRouter(tags=["Health"])

_OK = {"status": "ok"}


@router.get("/health", responses={200: {"content": {"application/json": {"example": _OK}}}})
async def health() -> JSONResponse:
    """200 while the server runs and its model is loaded. Needs no API key."""
    return JSONResponse(_OK)


@router.get("/ping", responses={200: {"content": {"application/json": {"example": _OK}}}})
async def ping() -> JSONResponse:
    """The same as /health (MLflow's name for it). Needs no API key."""
    return JSONResponse(_OK)


@router.get("/version", responses=error_responses(401))
async def version(request: Request) -> JSONResponse:
    import mlflow

    default = get_state(request).models.default  # the first model, which /invocations serves
    return JSONResponse(
        {
            "llmflow": __version__,
            "mlflow": mlflow.__version__,
            "model": default.name,
            "engine": default.engine_name,
        }
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}, **error_responses(401)},
)
async def metrics(request: Request) -> Response:
    """Prometheus text format: latency histograms, token and request counters, queue gauges."""
    return Response(get_state(request).metrics.exposition(), media_type=CONTENT_TYPE)
