"""How a server runs: address, limits and access. One validated object, passed to `create_app`."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from llmflow.media import images
from llmflow.media.reader import ImageReader
from llmflow.media.urls import DEFAULT_TIMEOUT_S, UrlPolicy
from llmflow.server.memory import parse_size
from llmflow.server.response_store import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


class ServerSettings(BaseModel):
    """Settings of one server. Defaults are safe: loopback only, bounded queue and body, a time limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(DEFAULT_HOST, description="interface to bind; 127.0.0.1 keeps the server local")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    api_key: SecretStr | None = Field(
        None,
        description="when set, every route but /health and /ping needs 'Authorization: Bearer <key>' "
        "(or 'x-api-key: <key>')",
    )
    max_running: int | None = Field(
        None, ge=1, description="generations at once; default: what the engine supports (1 unless it batches)"
    )
    max_queue: int = Field(16, ge=0, description="requests waiting for a place; beyond that, 429")
    request_timeout_s: float = Field(600.0, gt=0, description="time limit per request, queue included")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1, description="larger request bodies get 413")
    read_timeout_s: float = Field(
        30.0,
        gt=0,
        description="the request head, and then its body, must each arrive within this time; else 408 "
        "and the connection is closed",
    )
    max_connections: int = Field(
        256, ge=1, description="open connections at most; one more is answered 503 and closed at once"
    )
    keep_alive_timeout_s: float = Field(
        5.0, gt=0, description="an idle connection between two requests is closed after this time"
    )
    model_name: str | None = Field(None, description="the name clients use in 'model'; default: from MODEL")
    cors_origins: tuple[str, ...] = Field((), description="origins allowed by CORS; none: CORS off")
    retry_after_s: int = Field(1, ge=0, description="the Retry-After sent with 429 and 503")
    shutdown_grace_s: float = Field(
        10.0, ge=0, description="on SIGTERM, how long running streams may go on before they are ended"
    )
    max_n: int = Field(8, ge=1, description="answers one request may ask for at most (OpenAI's n)")
    reasoning_format: Literal["parsed", "none"] = Field(
        "parsed",
        description="parsed: a reasoning model's thinking (<think>...</think>) goes to "
        "delta.reasoning_content, apart from the answer; none: it stays in the content",
    )
    lazy: bool = Field(False, description="load each model at its first request instead of at start")
    max_loaded: int | None = Field(
        None,
        ge=1,
        description="models loaded at once at most; beyond, the least recently used idle one is unloaded",
    )
    idle_unload_s: float | None = Field(
        None,
        gt=0,
        description="unload a model that has served nothing for this long (it loads again when asked)",
    )
    max_memory: int | None = Field(
        None,
        ge=1,
        description="bytes (or a size such as '8GiB') the loaded models may take together, by their "
        "estimate (weights and KV cache); beyond, the least recently used idle ones are unloaded",
    )
    tracing: bool | None = Field(
        None, description="an MLflow trace per generation; None: only when an MLflow experiment is set"
    )
    response_store: str | None = Field(
        None,
        description="a sqlite file that keeps /v1/responses' stored responses across restarts; "
        "default: kept in memory only",
    )
    response_store_max: int = Field(
        DEFAULT_MAX_COUNT,
        ge=1,
        description="stored responses kept at most; beyond, the least recently used go",
    )
    response_store_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        ge=1,
        description="bytes (or a size such as '64MiB') the stored responses' JSON may take together; "
        "beyond, the least recently used go",
    )

    allow_image_urls: tuple[str, ...] = Field(
        (),
        description="hosts whose http(s) image URLs the server fetches (each hop's address checked: "
        "never a private, loopback, link-local or reserved one); none: images come inline only",
    )
    allow_image_networks: tuple[str, ...] = Field(
        (),
        description="private or reserved networks (CIDR, e.g. 127.0.0.0/8) that image URLs may reach "
        "after all, for an image server on this machine or this network",
    )
    image_url_timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, description="time limit for fetching one image URL, redirects included"
    )
    max_image_bytes: int = Field(
        images.DEFAULT_MAX_BYTES, ge=1, description="bytes (or a size such as '20MiB') one image may take"
    )
    max_image_pixels: int = Field(
        images.DEFAULT_MAX_PIXELS,
        ge=1,
        description="pixels one image may declare (checked before it is decoded: a decompression bomb)",
    )
    max_images: int = Field(
        images.DEFAULT_MAX_IMAGES, ge=0, description="images one request may hold at most"
    )

    @field_validator("max_memory", "response_store_bytes", "max_image_bytes", mode="before")
    @classmethod
    def _read_size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("allow_image_urls", "allow_image_networks", mode="before")
    @classmethod
    def _read_list(cls, value: object) -> object:
        """A comma-separated string, or a list (of such strings)."""
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            return value
        return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())

    @field_validator("allow_image_networks")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not a network (such as 127.0.0.0/8 or 10.1.2.3)") from None
        return value

    def image_reader(self) -> ImageReader:
        """How this server reads a request's images: its limits and its URL policy."""
        limits = images.ImageLimits(self.max_image_bytes, self.max_image_pixels, self.max_images)
        urls = UrlPolicy.of(
            self.allow_image_urls, self.allow_image_networks, timeout_s=self.image_url_timeout_s
        )
        return ImageReader(limits, urls)
