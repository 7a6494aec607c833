"""llama.cpp's token routes: `POST /tokenize` and `POST /detokenize`, in llama.cpp server's shapes,
for every engine (through `LLM.tokenize` / `LLM.detokenize`). `model` is optional: without it, the
server's default (first) model answers."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from llmflow.errors import valid_unicode
from llmflow.server.model_registry import model_for
from llmflow.server.openai import llm_for
from llmflow.server.schemas import ClosedModel, error_responses

router = APIRouter(tags=["Tokens"])


class TokenizeRequest(ClosedModel):
    content: str = Field(description="the text to tokenize")
    add_special: bool = Field(False, description="add BOS (when the model wants one), as a prompt gets")
    parse_special: bool = Field(True, description="read special-token text (<|im_end|>) as that token")
    with_pieces: bool = Field(
        False, description="each token as {id, piece}; a piece that is not whole UTF-8 is a list of bytes"
    )
    model: str | None = Field(None, description="a served model's name (optional: the default model)")


class DetokenizeRequest(ClosedModel):
    tokens: list[int] = Field(description="token ids")
    model: str | None = Field(None, description="a served model's name (optional: the default model)")


class TokenPiece(BaseModel):
    id: int
    piece: str | list[int]


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeResponse(BaseModel):
    content: str


@router.post("/tokenize", response_model=TokenizeResponse, responses=error_responses(400, 401, 404, 413))
async def tokenize(body: TokenizeRequest, request: Request) -> JSONResponse:
    """Token ids of `content`; with `with_pieces`, each with its text."""
    llm = llm_for(await model_for(request, body.model))
    with valid_unicode("content"):
        ids = await asyncio.to_thread(
            llm.tokenize, body.content, add_special=body.add_special, parse_special=body.parse_special
        )
    if not body.with_pieces:
        return JSONResponse({"tokens": ids})
    pieces = llm.token_pieces(ids)
    return JSONResponse({"tokens": [{"id": t, "piece": _piece(p)} for t, p in zip(ids, pieces, strict=True)]})


@router.post("/detokenize", response_model=DetokenizeResponse, responses=error_responses(400, 401, 404, 413))
async def detokenize(body: DetokenizeRequest, request: Request) -> JSONResponse:
    """The text of `tokens` (special tokens as their text)."""
    llm = llm_for(await model_for(request, body.model))
    return JSONResponse({"content": llm.detokenize(body.tokens)})


def _piece(piece: bytes) -> Any:
    """llama.cpp's rule: the text when the bytes are whole UTF-8, else the byte values."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)
