"""Images into a transformers vision-language model (image-text-to-text: SmolVLM, Idefics3,
LLaVA, ...) through the model's own processor.

The processor expands each image placeholder of a rendered prompt into the model's image tokens
(wrapper tokens around runs of one image token, a run per tile); `VisionInputs.tokenize` keeps its
ids and gives each run's positions the image's own ids (`llmflow.media.prompt`), so that lengths,
caches and usage reason about ids as for any prompt. At generation the runs go back to the
processor's image token, the prompt is embedded, and each run's positions take the image's
encoded features (the vision tower and connector's output, `get_image_features`), which the
decode loop prefills as `inputs_embeds`.

Encoding is most of an image's cost, so encoded images are kept by hash (`EncodedImages`): an
image sent again (a resent conversation, another request) is not encoded again.
"""

from __future__ import annotations

import inspect
import io
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from llmflow.engines.encoded_images import EncodedImages
from llmflow.errors import EngineFailed, InvalidRequest
from llmflow.media.prompt import MediaPrompt, PromptImage, image_ids, is_image_id
from llmflow.types import Image

IMAGE_TEXT_TO_TEXT = "AutoModelForImageTextToText"


def is_vision_model(path: Path) -> bool:
    """Whether the directory holds a vision-language model that transformers loads as
    image-text-to-text: a vision config, and a model type (or remote code) of that task."""
    config = json.loads((path / "config.json").read_text())
    if "vision_config" not in config:
        return False
    if IMAGE_TEXT_TO_TEXT in config.get("auto_map", {}):
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.get("model_type") in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def why_no_images(model: Any, processor: Any) -> str | None:
    """Why images cannot reach this model through `VisionInputs` (None: they can)."""
    if getattr(processor, "image_token", None) is None or getattr(processor, "image_processor", None) is None:
        return "its processor has no image token or image processor"
    if not callable(getattr(model, "get_image_features", None)):
        return "the model has no get_image_features"
    if any(callable(getattr(m, "get_rope_index", None)) for m in (model, getattr(model, "model", None))):
        return "the model places images by M-RoPE positions, which llmflow does not give yet"
    return None


class VisionInputs:
    """A vision-language model's processor and vision side: prompts with images as ids, and the
    prompt's embeddings with each image's features in place. Thread-safe (the cache locks)."""

    def __init__(self, model: Any, processor: Any, cache_bytes: int):
        self._model = model
        self._processor = processor
        self.image_token: str = processor.image_token
        self.image_token_id = int(processor.tokenizer.convert_tokens_to_ids(self.image_token))
        #: a run of the image token in an image's expansion: one span (a tile) of its features
        self._run = re.compile(f"(?:{re.escape(self.image_token)})+")
        accepted = inspect.signature(model.get_image_features).parameters
        self._feature_args = frozenset(accepted)
        self.encoded: EncodedImages[Any] = EncodedImages(cache_bytes)

    def tokenize(self, text: str, images: Sequence[Image], *, add_special: bool) -> MediaPrompt:
        """`text` (a rendered prompt, one image token per image) as ids, each run of an image's
        tokens a span holding the image's ids."""
        field = images[0].field
        if text.count(self.image_token) != len(images):
            raise InvalidRequest.single(
                field,
                f"the prompt holds {text.count(self.image_token)} image tokens ({self.image_token}) "
                f"for {len(images)} images",
            )
        try:
            out = self._processor(
                text=[text],
                images=[_picture(image) for image in images],
                add_special_tokens=add_special,
                return_text_replacement_offsets=True,
            )
        except (ValueError, TypeError) as exc:
            raise InvalidRequest.single(
                field, f"the model's processor refused the prompt's images: {exc}"
            ) from None
        ids = [int(t) for t in out["input_ids"][0]]
        runs = _runs(ids, self.image_token_id)
        layouts = self._layouts(out, len(images), len(runs), field)
        spans: list[PromptImage] = []
        found = iter(runs)
        for image, lengths in zip(images, layouts, strict=True):
            for part, expected in enumerate(lengths):
                start, n = next(found)
                if expected is not None and n != expected:
                    raise EngineFailed(
                        f"the processor gave an image {n} tokens where its text has {expected}"
                    )
                spans.append(PromptImage(start, n, image, part))
                ids[start : start + n] = image_ids(image, n, part)
        return MediaPrompt(ids, spans)

    def _layouts(self, out: Any, n_images: int, n_runs: int, field: str) -> list[list[int | None]]:
        """Each image's runs of image tokens (their lengths), from the text the processor put in
        its place; without that record, one run each (of any length)."""
        offsets = out.get("text_replacement_offsets")
        if offsets:
            replaced = [o["replacement"] for o in offsets[0] if o.get("type") == "image"]
            layouts: list[list[int | None]] = [
                [len(m) // len(self.image_token) for m in self._run.findall(r)] for r in replaced
            ]
            if len(layouts) == n_images and sum(map(len, layouts)) == n_runs:
                return layouts
        if n_runs == n_images:
            return [[None]] * n_images
        raise InvalidRequest.single(
            field, f"the processor gave {n_images} images {n_runs} runs of image tokens; cannot place them"
        )

    def prompt_inputs(self, prompt: MediaPrompt, device: Any) -> tuple[Any, Any]:
        """The prompt's ids as the model knows them ([1, n]: image positions back to the image
        token) and its embeddings ([1, n, hidden]: each image span its encoded features)."""
        import torch

        ids = torch.tensor(
            [[self.image_token_id if is_image_id(t) else t for t in prompt]], dtype=torch.long, device=device
        )
        with torch.inference_mode():
            embeds = self._model.get_input_embeddings()(ids)
            for occurrence in _occurrences(prompt.images):
                features = self._features(occurrence, device)
                for span, feature in zip(occurrence, features, strict=True):
                    embeds[0, span.start : span.end] = feature.to(embeds.dtype)
        return ids, embeds

    def _features(self, occurrence: Sequence[PromptImage], device: Any) -> list[Any]:
        """One image's features, a tensor [n_tokens, hidden] per span: kept, or encoded now."""
        image = occurrence[0].image
        kept = [self.encoded.get((image.sha256, span.part)) for span in occurrence]
        if all(k is not None for k in kept):
            return kept
        whole = self._encode(image, device)
        sizes = [span.n_tokens for span in occurrence]
        if whole.shape[0] != sum(sizes):
            raise EngineFailed(
                f"the vision tower gave the image at {image.field} {whole.shape[0]} positions; "
                f"the prompt has {sum(sizes)}"
            )
        parts = list(whole.split(sizes))
        for span, part in zip(occurrence, parts, strict=True):
            self.encoded.put((image.sha256, span.part), part)
        return parts

    def _encode(self, image: Image, device: Any) -> Any:
        """The vision tower and connector's output for `image`: [positions, hidden]."""
        import torch

        pixels = self._processor.image_processor(images=[_picture(image)], return_tensors="pt")
        dtype = self._model.dtype
        inputs = {
            k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
            for k, v in pixels.items()
            if k in self._feature_args and isinstance(v, torch.Tensor)
        }
        with torch.inference_mode():
            out = self._model.get_image_features(**inputs)
        return _flat(out)


def _flat(out: Any) -> Any:
    """`get_image_features`' output as one [positions, hidden] tensor: a tensor, a list of them
    (one per image or tile) or a model output whose `pooler_output` is the projected features."""
    import torch

    if not isinstance(out, (torch.Tensor, list, tuple)):
        out = out.pooler_output
    tensors = [out] if isinstance(out, torch.Tensor) else list(out)
    return torch.cat([t.reshape(-1, t.shape[-1]) for t in tensors])


def _runs(ids: Sequence[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of each run of `token` in `ids`."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != token:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _occurrences(spans: Sequence[PromptImage]) -> Iterator[list[PromptImage]]:
    """The prompt's spans, grouped by each place an image stands (its parts 0, 1, ...)."""
    group: list[PromptImage] = []
    for span in spans:
        if span.part == 0 and group:
            yield group
            group = []
        group.append(span)
    if group:
        yield group


def _picture(image: Image) -> Any:
    """The image as RGB pixels (Pillow, which read it already when the request came)."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(image.data)) as opened:
        return opened.convert("RGB")
