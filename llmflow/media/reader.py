"""A conversation's images read at once: each `ImageRef` becomes a checked `Image` (or the
request is refused, naming the image's field). A server reads with its own limits and URL
policy before it prepares the request (`read`, off the event loop); in process (`read_now`)
only inline images are read, since fetching URLs is a server's decision."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmflow.errors import InvalidImage
from llmflow.media.images import ImageLimits, inline_bytes, read_image
from llmflow.media.urls import UrlPolicy, fetch_image
from llmflow.types import Image, ImageRef, Message


@dataclass(frozen=True, slots=True)
class ImageReader:
    limits: ImageLimits = field(default_factory=ImageLimits)
    urls: UrlPolicy = field(default_factory=UrlPolicy)

    def read_now(self, messages: Sequence[Message]) -> list[Message]:
        """Inline images read here; an image URL is refused (only a server fetches)."""
        self._count(messages)
        return [self._with(m, [self._inline(p) for p in m.parts]) if _unread(m) else m for m in messages]

    async def read(self, messages: Sequence[Message]) -> list[Message]:
        """Every image read: inline ones decoded in a worker thread, URLs fetched as allowed."""
        self._count(messages)
        out = []
        for message in messages:
            if not _unread(message):
                out.append(message)
                continue
            parts = [await self._read_part(p) for p in message.parts]
            out.append(self._with(message, parts))
        return out

    async def _read_part(self, part: object) -> object:
        if not isinstance(part, ImageRef):
            return part
        if not part.is_remote:
            return await asyncio.to_thread(self._inline, part)
        data = await fetch_image(part.url, part.field, self.urls, self.limits.max_bytes)
        return await asyncio.to_thread(read_image, data, part.field, self.limits)

    def _inline(self, part: object) -> object:
        if not isinstance(part, ImageRef):
            return part
        if part.is_remote:
            raise InvalidImage(
                part.field, "image URLs are fetched only by a server that allows them: send a data URI"
            )
        return read_image(inline_bytes(part, self.limits), part.field, self.limits)

    def _count(self, messages: Sequence[Message]) -> None:
        images = [image for m in messages for image in m.images]
        if len(images) > self.limits.max_images:
            raise InvalidImage(
                images[self.limits.max_images].field,
                f"a request may hold {self.limits.max_images} images at most",
            )

    @staticmethod
    def _with(message: Message, parts: list[object]) -> Message:
        return dataclasses.replace(message, parts=tuple(parts))  # type: ignore[arg-type]


def _unread(message: Message) -> bool:
    return any(isinstance(p, ImageRef) for p in message.parts)


def has_images(messages: Sequence[Message]) -> bool:
    return any(m.parts and any(isinstance(p, (ImageRef, Image)) for p in m.parts) for m in messages)
