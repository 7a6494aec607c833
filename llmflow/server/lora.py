"""LoRA adapters of a served model, loaded and unloaded while it serves: `GET /v1/lora-adapters`,
`POST /v1/lora-adapters` (a GGUF adapter file on the server's disk, by name) and
`DELETE /v1/lora-adapters/{name}`. A request then picks a loaded adapter as `model: BASE:NAME` or
with `lora` (and `lora_scale`). `model` is optional: without it, the server's default model.
Loading reads a file of the server's own disk: put the server behind `--api-key` when it is
reachable by others."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from llmflow.server.model_registry import model_for
from llmflow.server.openai import llm_for
from llmflow.server.schemas import ClosedModel, error_responses

router = APIRouter(tags=["LoRA adapters"])


class LoadAdapterRequest(ClosedModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the adapter's name")
    path: str = Field(min_length=1, description="the GGUF adapter file, on the server's disk")
    model: str | None = Field(None, description="a served model's name (optional: the default model)")


def _listing(model: str, names: tuple[str, ...]) -> dict[str, object]:
    return {"model": model, "adapters": [{"name": n, "id": f"{model}:{n}"} for n in names]}


@router.get("/v1/lora-adapters", responses=error_responses(401, 404))
async def list_adapters(request: Request, model: str | None = None) -> JSONResponse:
    state = await model_for(request, model)
    return JSONResponse(_listing(state.served.name, llm_for(state).engine.lora_names))


@router.post("/v1/lora-adapters", responses=error_responses(400, 401, 404))
async def load_adapter(body: LoadAdapterRequest, request: Request) -> JSONResponse:
    state = await model_for(request, body.model)
    engine = llm_for(state).engine
    await asyncio.to_thread(engine.load_adapter, body.name, body.path)
    return JSONResponse(_listing(state.served.name, engine.lora_names))


@router.delete("/v1/lora-adapters/{name}", responses=error_responses(401, 404))
async def unload_adapter(name: str, request: Request, model: str | None = None) -> JSONResponse:
    state = await model_for(request, model)
    engine = llm_for(state).engine
    engine.unload_adapter(name)
    return JSONResponse(_listing(state.served.name, engine.lora_names))
