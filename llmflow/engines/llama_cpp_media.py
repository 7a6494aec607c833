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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmflow.errors import EngineFailed, InvalidParams, InvalidRequest
from llmflow.media.prompt import MediaPrompt, PromptImage, image_ids, is_image_id
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
        self._n_embd = lib.llama_model_n_embd_inp(model)
        self._lock = threading.RLock()
        self._encoded = EncodedImages(options.cache_bytes)

    @property
    def encoded(self) -> EncodedImages:
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
        return MediaPrompt(ids, spans)

    def evaluate(self, lctx: Any, span: PromptImage, n_past: int, seq_id: int, n_batch: int) -> bool:
        """Decode `span`'s image chunk into sequence `seq_id` at `n_past` (its embeddings from the
        cache, or encoded now). True when its embeddings came from the cache."""
        mtmd = self._mtmd
        with self._lock, self._chunks(MARKER, [span.image]) as chunks:
            images = [c for c in chunks if mtmd.mtmd_input_chunk_get_type(c) == IMAGE_CHUNK]
            chunk = images[span.part]
            key = (span.image.sha256, span.part)
            embd = self._encoded.get(key)
            cached = embd is not None
            if embd is None:
                if mtmd.mtmd_encode_chunk(self._ctx, chunk) != 0:
                    raise EngineFailed(f"llama.cpp could not encode the image at {span.image.field}")
                out = mtmd.mtmd_get_output_embd(self._ctx)
                embd = np.ctypeslib.as_array(out, shape=(span.n_tokens * self._n_embd,)).copy()
                self._encoded.put(key, embd)
            new_n_past = self._lib.llama_pos(0)
            pointer = embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            done = ctypes.byref(new_n_past)
            no_callback = mtmd.mtmd_helper_post_decode_callback()  # a NULL one: ctypes refuses None
            status = mtmd.mtmd_helper_decode_image_chunk(
                self._ctx, lctx, chunk, pointer, n_past, seq_id, n_batch, done, no_callback, None
            )
        if status != 0:
            raise EngineFailed(
                f"llama_decode failed with status {status} on an image of {span.n_tokens} tokens"
            )
        return cached

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


class EncodedImages:
    """Encoded image chunks (float32 embeddings) by (image hash, chunk), least recently used
    dropped first past `budget` bytes; counts its hits and misses."""

    def __init__(self, budget: int):
        self.budget = budget
        self._items: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, int]) -> np.ndarray | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: tuple[str, int], embd: np.ndarray) -> None:
        if embd.nbytes > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self.bytes -= old.nbytes if old is not None else 0
            self._items[key] = embd
            self.bytes += embd.nbytes
            while self.bytes > self.budget:
                _, dropped = self._items.popitem(last=False)
                self.bytes -= dropped.nbytes
