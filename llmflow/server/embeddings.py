"""OpenAI's `POST /v1/embeddings`: unit vectors from the served GGUF model's embedding context
(see `llmflow.embeddings` and `llmflow.engines.llama_cpp_embed`), as floats or as base64 of
little-endian float32 (what the official `openai` client asks for by default)."""

from __future__ import annotations

import asyncio
import base64
import sys
from array import array
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from llmflow.embeddings import embed
from llmflow.server.model_registry import model_for
from llmflow.server.openai import llm_for
from llmflow.server.schemas import ClosedModel, error_responses

router = APIRouter(prefix="/v1", tags=["OpenAI"])


class EmbeddingRequest(ClosedModel):
    model: str = Field(description="the served model's name, as listed by GET /v1/models")
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="a text, a list of texts, a list of token ids, or a list of token-id lists"
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector as little-endian float32 bytes"
    )
    dimensions: int | None = Field(None, ge=1, description="keep the first n dimensions (renormalised)")
    user: str | None = Field(None, description="accepted and ignored")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@router.post("/embeddings", response_model=EmbeddingList, responses=error_responses(400, 401, 404, 413))
async def embeddings(body: EmbeddingRequest, request: Request) -> JSONResponse:
    """Embed every input; a model that cannot pool token states answers 400 naming `model`."""
    state = await model_for(request, body.model)
    llm = llm_for(state)
    result = await asyncio.to_thread(embed, llm, body.input, dimensions=body.dimensions)
    as_base64 = body.encoding_format == "base64"
    data = [
        {"object": "embedding", "index": i, "embedding": _base64(vector) if as_base64 else vector}
        for i, vector in enumerate(result.vectors)
    ]
    usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    return JSONResponse({"object": "list", "data": data, "model": state.served.name, "usage": usage})


def _base64(vector: list[float]) -> str:
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
