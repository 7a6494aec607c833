"""Images into a llama.cpp context through llama.cpp's multimodal library (`mtmd`): a model's
projector (`mmproj` GGUF) loaded beside it, a prompt's text and images tokenized into a
`MediaPrompt` (text ids, and each image chunk's span of positions), and an image chunk's
positions evaluated into a sequence's KV at once.

An image is encoded (the vision tower and projector: most of an image's cost) once per image:
the encoded embeddings are kept in a byte-budgeted LRU keyed by the image's hash and chunk, so
a conversation that resends an image, or another that sends the same one, only decodes them into
the text model's KV (and a kept conversation does not even do that: its KV prefix is reused)."""

from __future__ import annotations

import ctypes
import io
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from llmflow.engines.encoded_images import EncodedImages
from llmflow.errors import EngineFailed, InvalidParams, InvalidRequest
from llmflow.media.prompt import ImageCacheStats, MediaPrompt, PromptImage, image_ids, is_image_id
from llmflow.types import Image

#: the text that stands for an image in a rendered prompt (mtmd's own default marker)
MARKER = "<__media__>"
#: mtmd's chunk types
TEXT_CHUNK, IMAGE_CHUNK = 0, 1


@dataclass(frozen=True, slots=True)
class MediaOptions:
    """What a projector is loaded with: its file, where it runs, and the encoded-image cache."""

    mmproj: Path
    use_gpu: bool
    n_threads: int
    flash_attn: bool
    cache_bytes: int
    #: llama.cpp's own log lines of the projector (every image's steps) on stderr
    verbose: bool = False


class Projector:
    """A model's `mtmd` context: tokenizes prompts with images and evaluates image chunks.
    Thread-safe: a lock serialises its calls (one `mtmd` context, one output buffer)."""

    def __init__(self, lib: Any, model: Any, options: MediaOptions):
        try:
            import llama_cpp.mtmd_cpp as mtmd
        except (OSError, FileNotFoundError, RuntimeError) as exc:
            raise InvalidParams.single(
                "mmproj", f"this llama.cpp build has no multimodal library (LLAVA_BUILD=ON): {exc}"
            ) from None

        self._mtmd = mtmd
        self._lib = lib
        if not options.verbose:
            _silence(lib, mtmd)
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = options.use_gpu
        params.n_threads = options.n_threads
        params.print_timings = False
        params.warmup = False
        params.media_marker = MARKER.encode()
        params.flash_attn_type = 1 if options.flash_attn else 0
        self._ctx = mtmd.mtmd_init_from_file(str(options.mmproj).encode(), model, params)
        if not self._ctx:
            raise InvalidParams.single(
                "mmproj", f"llama.cpp could not load the projector {options.mmproj.name}"
            )
        if not mtmd.mtmd_support_vision(self._ctx):
            self.close()
            raise InvalidParams.single("mmproj", f"{options.mmproj.name} is not a vision projector")
        if mtmd.mtmd_decode_use_mrope(self._ctx):
            self.close()
            raise InvalidParams.single(
                "mmproj",
                f"{options.mmproj.name} needs M-RoPE image positions, which llmflow does not support yet",
            )
        #: the text model's input width: an encoded position's size
        self.n_embd = int(lib.llama_model_n_embd_inp(model))
        #: the model attends to an image's positions all at once (Gemma 3): evaluated in one pass
        self.non_causal = bool(mtmd.mtmd_decode_use_non_causal(self._ctx, None))
        self._lock = threading.RLock()
        self._encoded: EncodedImages[np.ndarray] = EncodedImages(options.cache_bytes)

    @property
    def encoded(self) -> EncodedImages[np.ndarray]:
        return self._encoded

    def tokenize(self, text: str, images: Sequence[Image], field: str = "messages") -> MediaPrompt:
        """`text` (a rendered prompt, one `MARKER` per image) as ids with each image chunk's span."""
        if text.count(MARKER) != len(images):
            raise InvalidRequest.single(
                field,
                f"the prompt holds {text.count(MARKER)} image markers ({MARKER}) for {len(images)} images",
            )
        # an image may come as several chunks (a model that cuts it into tiles): each image's
        # chunks, counted alone, in the order the prompt's chunks come
        slices = iter([(image, part) for image in images for part in range(self._image_chunks(image))])
        ids: list[int] = []
        spans: list[PromptImage] = []
        with self._lock, self._chunks(text, images) as chunks:
            for chunk in chunks:
                if self._mtmd.mtmd_input_chunk_get_type(chunk) == TEXT_CHUNK:
                    text_ids = self._text_tokens(chunk)
                    if any(is_image_id(t) for t in text_ids):
                        # mtmd writes the markup around an image with the special tokens its
                        # projector expects, looked up by text: a vocabulary without one gets
                        # no id (-1), which would read as an image position here
                        raise EngineFailed(
                            "the model's vocabulary lacks a special token its projector writes around "
                            "images: the model and its mmproj file do not belong together"
                        )
                    ids.extend(text_ids)
                    continue
                image, part = next(slices)
                n = int(self._mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                spans.append(PromptImage(len(ids), n, image, part))
                ids.extend(image_ids(image, n, part))
        if spans and spans[-1].end == len(ids):
            # the first token is sampled from the logits of the prompt's last text token
            raise InvalidRequest.single(field, "a prompt may not end with an image: add text after it")
        return MediaPrompt(ids, spans)

    def encode(self, span: PromptImage) -> np.ndarray:
        """`span`'s image chunk through the vision tower and projector: its embeddings, a row of
        the text model's input width per position; from the cache when it holds them. The slow
        part of an image, and the only one that needs the projector: a batching engine runs it
        beside its decode loop."""
        key = (span.image.sha256, span.part)
        embd = self._encoded.get(key)
        if embd is not None:
            return embd
        mtmd = self._mtmd
        with self._lock, self._chunks(MARKER, [span.image]) as chunks:
            chunk = [c for c in chunks if mtmd.mtmd_input_chunk_get_type(c) == IMAGE_CHUNK][span.part]
            if mtmd.mtmd_encode_chunk(self._ctx, chunk) != 0:
                raise EngineFailed(f"llama.cpp could not encode the image at {span.image.field}")
            out = mtmd.mtmd_get_output_embd(self._ctx)
            embd = np.ctypeslib.as_array(out, shape=(span.n_tokens, self.n_embd)).copy()
        self._encoded.put(key, embd)
        return embd

    def decode(self, lctx: Any, span: PromptImage, embd: np.ndarray, seq_id: int, n_batch: int) -> None:
        """Put an encoded image chunk into sequence `seq_id` of `lctx` at its span's positions:
        a forward pass of the text model over embeddings instead of tokens (the projector itself
        is not used, so this never waits for an image being encoded)."""
        lib = self._lib
        n = span.n_tokens
        if self.non_causal and n > n_batch:
            raise EngineFailed(f"an image of {n} positions needs n_batch of at least {n} (it is {n_batch})")
        batch = lib.llama_batch_init(min(n, n_batch), self.n_embd, 1)
        rows = np.ctypeslib.as_array(batch.embd, shape=(min(n, n_batch), self.n_embd))
        if self.non_causal:
            lib.llama_set_causal_attn(lctx, False)
        try:
            for offset in range(0, n, n_batch):
                piece = embd[offset : offset + n_batch]
                rows[: len(piece)] = piece
                for i in range(len(piece)):
                    batch.pos[i] = span.start + offset + i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = seq_id
                    batch.logits[i] = 0
                batch.n_tokens = len(piece)
                status = lib.llama_decode(lctx, batch)
                if status != 0:
                    raise EngineFailed(f"llama_decode failed (status {status}) on an image of {n} positions")
        finally:
            if self.non_causal:
                lib.llama_set_causal_attn(lctx, True)
            lib.llama_batch_free(batch)

    def _image_chunks(self, image: Image) -> int:
        with self._lock, self._chunks(MARKER, [image]) as chunks:
            return sum(self._mtmd.mtmd_input_chunk_get_type(c) == IMAGE_CHUNK for c in chunks)

    def _text_tokens(self, chunk: Any) -> list[int]:
        n = ctypes.c_size_t(0)
        pointer = self._mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
        return [int(pointer[i]) for i in range(n.value)]

    def _chunks(self, text: str, images: Sequence[Image]) -> _Chunks:
        return _Chunks(self._mtmd, self._ctx, text, images)

    def close(self) -> None:
        if self._ctx:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None


def _silence(lib: Any, mtmd: Any) -> None:
    """Send the multimodal library's log lines nowhere (it logs every image's steps). Its log
    callback is process-wide and must outlive every projector: one, kept by the module."""
    global _SILENT
    if _SILENT is None:
        _SILENT = lib.llama_log_callback(lambda level, text, user_data: None)
    mtmd.mtmd_log_set(_SILENT, None)
    mtmd.mtmd_helper_log_set(_SILENT, None)


#: the no-op log callback (see `_silence`)
_SILENT: Any = None


class ReadsImages:
    """The `Engine` methods of a llama.cpp engine that may have a projector (`_projector`, None
    for a text-only model); listed before `Engine` in the engine's bases."""

    projector_option: ClassVar[str | None] = "mmproj"
    _projector: Projector | None

    @property
    def input_modalities(self) -> tuple[str, ...]:
        return ("text", "image") if self._projector is not None else ("text",)

    @property
    def image_marker(self) -> str | None:
        return MARKER if self._projector is not None else None

    def image_stats(self) -> ImageCacheStats | None:
        return self._projector.encoded.stats() if self._projector is not None else None

    def tokenize_prompt(self, text: str, images: Sequence[Image]) -> Sequence[int]:
        if images and self._projector is not None:
            return self._projector.tokenize(text, images)
        return super().tokenize_prompt(text, images)  # type: ignore[misc]


class _Chunks:
    """`mtmd_tokenize`'s chunks of a text and its images, freed on exit (with the bitmaps)."""

    def __init__(self, mtmd: Any, ctx: Any, text: str, images: Sequence[Image]):
        self._mtmd, self._ctx, self._text, self._images = mtmd, ctx, text, images
        self._bitmaps: list[Any] = []
        self._chunks: Any = None

    def __enter__(self) -> list[Any]:
        mtmd = self._mtmd
        self._bitmaps = [_bitmap(mtmd, image) for image in self._images]
        self._chunks = mtmd.mtmd_input_chunks_init()
        encoded = self._text.encode()
        text = mtmd.mtmd_input_text(encoded, len(encoded), True, True)
        array = (mtmd.mtmd_bitmap_p_ctypes * max(len(self._bitmaps), 1))(*self._bitmaps)
        status = mtmd.mtmd_tokenize(self._ctx, self._chunks, ctypes.byref(text), array, len(self._bitmaps))
        if status != 0:
            field = self._images[0].field if self._images else "messages"
            raise InvalidRequest.single(
                field, f"llama.cpp could not tokenize the prompt's images (status {status})"
            )
        return [
            mtmd.mtmd_input_chunks_get(self._chunks, i)
            for i in range(mtmd.mtmd_input_chunks_size(self._chunks))
        ]

    def __exit__(self, *_: object) -> None:
        if self._chunks is not None:
            self._mtmd.mtmd_input_chunks_free(self._chunks)
        for bitmap in self._bitmaps:
            self._mtmd.mtmd_bitmap_free(bitmap)


def _bitmap(mtmd: Any, image: Image) -> Any:
    """The image's RGB pixels as an `mtmd` bitmap, with its hash as the bitmap's id (decoded by
    Pillow, which read it already: every format llmflow accepts, where mtmd's own reads fewer)."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(image.data)) as opened:
        rgb = opened.convert("RGB")
    pixels = rgb.tobytes()
    buffer = (ctypes.c_uint8 * len(pixels)).from_buffer_copy(pixels)
    bitmap = mtmd.mtmd_bitmap_init(rgb.width, rgb.height, buffer)
    mtmd.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
    return bitmap
