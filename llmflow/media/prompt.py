"""A prompt that holds images: token ids in which each image occupies the span of positions the
model gives it, so that everything that reasons about a prompt by its ids (lengths, context
limits, usage, the conversation cache's common prefix) keeps working unchanged.

An image's positions hold ids derived from the image's bytes, negative so that they never name a
vocabulary token: the same image at the same place gives the same ids (a resent conversation
reuses its cached KV through its images), another image gives other ids (no prefix match runs
through an image it did not see). Engines that read images build a `MediaPrompt` in
`Engine.tokenize_prompt` and evaluate each `PromptImage` span whole."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmflow.types import Image

#: image ids live in [-IMAGE_ID_SPACE, -1]: within int32, as llama.cpp keeps token ids
IMAGE_ID_SPACE = 2**30


@dataclass(frozen=True, slots=True)
class PromptImage:
    """One image of a prompt: where its span starts in the ids, how many positions it takes,
    and the image itself (its hash keys an engine's cache of encoded images)."""

    start: int
    n_tokens: int
    image: Image
    #: which of the image's chunks (a model may cut an image into tiles, a span each)
    part: int = 0

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass(frozen=True, slots=True)
class ImageCacheStats:
    """An engine's cache of encoded images: image chunks encoded and reused (an encoding found
    in the cache) since it loaded, and the bytes it holds now."""

    encoded: int
    reused: int
    bytes: int


class MediaPrompt(tuple[int, ...]):
    """Token ids (a tuple, as any prompt's ids) and the images whose spans they hold, in order."""

    images: tuple[PromptImage, ...]

    def __new__(cls, ids: Iterable[int], images: Sequence[PromptImage]) -> MediaPrompt:
        prompt = super().__new__(cls, ids)
        prompt.images = tuple(images)
        return prompt

    def image_at(self, position: int) -> PromptImage | None:
        """The image whose span holds `position`, if any."""
        for image in self.images:
            if image.start <= position < image.end:
                return image
        return None

    def cut_before_image(self, position: int) -> int:
        """`position`, moved back to the start of an image it falls inside: a cached prefix may end
        only where a whole image has been evaluated."""
        image = self.image_at(position)
        return position if image is None or image.start == position else image.start


def image_ids(image: Image, n_tokens: int, part: int = 0) -> list[int]:
    """The ids that stand for the `n_tokens` positions of `image`'s chunk `part`."""
    base = int(hashlib.sha256(f"{image.sha256}:{part}".encode()).hexdigest()[:16], 16)
    return [-1 - (base + k) % IMAGE_ID_SPACE for k in range(n_tokens)]


def is_image_id(token: int) -> bool:
    return token < 0


def media_images(prompt: Sequence[int]) -> tuple[PromptImage, ...]:
    """The images of a prompt (none for plain ids)."""
    return prompt.images if isinstance(prompt, MediaPrompt) else ()


def whole_images(prompt: Sequence[int], position: int) -> int:
    """`position` as a kept prefix's end: moved back to the start of an image it cuts."""
    return prompt.cut_before_image(position) if isinstance(prompt, MediaPrompt) else position
