"""The transformers engine with a vision-language model: the project's tiny random-weight SmolVLM
(`vision_model`), loaded with its processor. An image's positions are the processor's, held as
the image's own ids; the prefill is the model's own with the image's pixels; an image sent again
is not encoded again; what cannot take images refuses them by field."""

from __future__ import annotations

import base64
import io
import math

import pytest

from tests.extras import missing

pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))

from llmflow import LLM
from llmflow.engines import guess_engine
from llmflow.engines.hf import TransformersEngine
from llmflow.errors import InvalidParams, UnsupportedInput
from llmflow.media.prompt import MediaPrompt, is_image_id
from llmflow.types import Image
from tests.fakes.hf_models import write_tiny_model
from tests.media.images import data_uri

#: making the model runs llama.cpp's converter too (see tests/media/test_vision_model.py)
pytestmark = pytest.mark.timeout(1200)
ON_CPU = {"device": "cpu"}
QUESTION = "What is in this picture?"
IMAGE_FIELD = "messages[0].content[1]"


def picture(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    """A PNG of random pixels: each seed its own image (its own hash and its own features)."""
    import numpy as np
    from PIL import Image as PILImage

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def chat(*images: bytes, text: str = QUESTION) -> list[dict]:
    parts = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": data_uri(data)}} for data in images]
    return [{"role": "user", "content": parts}]


@pytest.fixture(scope="module")
def vision_dir(vision_model):
    folder, summary = vision_model
    return folder / "hf", summary


@pytest.fixture(scope="module")
def vlm(vision_dir):
    path, _ = vision_dir
    llm = LLM.load(str(path), engine="transformers", engine_options={**ON_CPU, "ignore_eos": True})
    yield llm
    llm.close()


def test_a_vision_model_directory_loads_with_its_processor_and_reads_images(vision_dir, vlm):
    path, _ = vision_dir
    assert guess_engine(path) == "transformers"
    engine = vlm.engine
    assert isinstance(engine, TransformersEngine)
    assert engine.input_modalities == ("text", "image")
    assert engine.image_marker is None  # the template's typed part, which the processor expands
    assert "<image>" in vlm.render(chat(picture(0)))
    assert vlm.generate("Hello", {"max_tokens": 2, "temperature": 0}).usage.completion_tokens == 2


def test_a_chat_with_an_image_streams_tokens(vlm):
    chunks = list(vlm.stream(chat(picture(1)), {"max_tokens": 5, "temperature": 0}))
    final = chunks[-1]
    assert final.is_final and final.usage is not None
    assert final.usage.completion_tokens == 5  # ignore_eos: every token asked for


def test_an_image_takes_its_tokens_and_the_processors_wrapper(vision_dir, vlm):
    """One image: its 4 positions (a run of <image>) and the 3 wrapper tokens around it (SmolVLM's
    <fake_token_around_image><global-img> ... <fake_token_around_image>), per image."""
    _, summary = vision_dir
    assert summary["image_tokens"] == 4 and summary["image_wrapper"] == 3
    per_image = summary["image_tokens"] + summary["image_wrapper"]
    text_only = len(vlm.prepare(chat()).prompt_ids)
    one = vlm.prepare(chat(picture(2))).prompt_ids
    two = vlm.prepare(chat(picture(2), picture(3))).prompt_ids
    assert len(one) - text_only == per_image == 7
    assert len(two) - text_only == 2 * per_image
    assert isinstance(two, MediaPrompt) and [span.n_tokens for span in two.images] == [4, 4]
    for span in two.images:
        assert all(is_image_id(t) for t in two[span.start : span.end])
    assert sum(is_image_id(t) for t in two) == 8  # the wrapper tokens are the model's own ids
    usage = vlm.generate(chat(picture(2)), {"max_tokens": 1, "temperature": 0}).usage
    assert usage.prompt_tokens == len(one)


def test_two_images_give_different_ids_only_where_they_stand(vlm):
    first = vlm.prepare(chat(picture(4))).prompt_ids
    second = vlm.prepare(chat(picture(5))).prompt_ids
    again = vlm.prepare(chat(picture(4))).prompt_ids
    assert len(first) == len(second) and list(first) == list(again)
    (span,) = first.images
    differ = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    assert differ == list(range(span.start, span.end))


def test_the_static_cache_gives_the_dynamic_answers_with_an_image(vision_dir, vlm):
    """The prefill with an image's embeddings into the preallocated cache (CUDA's default path)."""
    path, _ = vision_dir
    params = {"temperature": 0.0, "max_tokens": 6, "logprobs": 1}
    dynamic = vlm.generate(chat(picture(10)), params)
    options = {**ON_CPU, "ignore_eos": True, "static_cache": True, "n_ctx": 256}
    static = LLM.load(str(path), engine="transformers", engine_options=options)
    try:
        answer = static.generate(chat(picture(10)), params)
    finally:
        static.close()
    assert [t.bytes for t in answer.logprobs] == [t.bytes for t in dynamic.logprobs]
    for ours, theirs in zip(answer.logprobs, dynamic.logprobs, strict=True):
        assert math.isclose(ours.logprob, theirs.logprob, abs_tol=1e-4)


def test_the_same_image_twice_is_encoded_once(vlm):
    cache = vlm.engine.encoded_images
    assert cache is not None
    image = picture(6)
    hits, misses = cache.hits, cache.misses
    vlm.generate(chat(image), {"max_tokens": 1, "temperature": 0})
    assert (cache.hits, cache.misses) == (hits, misses + 1)
    vlm.generate(chat(image, text="And now?"), {"max_tokens": 1, "temperature": 0})
    assert (cache.hits, cache.misses) == (hits + 1, misses + 1)


def test_the_prefill_is_the_models_own_with_the_images_pixels(vision_dir, vlm):
    """The first token's logprob through llmflow (the image's features as embeddings) is what
    transformers computes from the processor's ids and pixel values."""
    _assert_prefill_is_the_models_own(vlm, vision_dir[0], chat(picture(7)))


def test_an_image_cut_into_tiles_takes_a_span_per_tile(vision_dir, tmp_path):
    """With the processor splitting images (Idefics3's tiles of 64 pixels and a global view),
    each tile's run of image tokens is a span of its own, one part each, and the prefill is still
    the model's own."""
    import json
    import shutil

    tiled = tmp_path / "tiled"
    shutil.copytree(vision_dir[0], tiled)
    config = json.loads((tiled / "preprocessor_config.json").read_text())
    config.update(do_image_splitting=True, size={"longest_edge": 128})
    (tiled / "preprocessor_config.json").write_text(json.dumps(config))
    llm = LLM.load(str(tiled), engine="transformers", engine_options={**ON_CPU, "ignore_eos": True})
    try:
        messages = chat(picture(11, (120, 90)), picture(12, (30, 30)))
        prompt = llm.prepare(messages).prompt_ids
        assert [(span.n_tokens, span.part) for span in prompt.images] == [(4, part) for part in range(5)] * 2
        _assert_prefill_is_the_models_own(llm, tiled, messages)
        cache = llm.engine.encoded_images
        assert (cache.hits, cache.misses, len(cache)) == (0, 10, 10)  # two images of five parts
        llm.generate(messages, {"max_tokens": 1, "temperature": 0})
        assert (cache.hits, cache.misses) == (10, 10)
    finally:
        llm.close()


def _assert_prefill_is_the_models_own(llm: LLM, path, messages: list[dict]) -> None:
    import torch
    from PIL import Image as PILImage
    from transformers import AutoProcessor

    answer = llm.generate(messages, {"max_tokens": 1, "temperature": 0, "logprobs": 1})
    (first,) = answer.logprobs
    processor = AutoProcessor.from_pretrained(path)
    urls = [part["image_url"]["url"] for part in messages[0]["content"] if part["type"] == "image_url"]
    pixels = [
        PILImage.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB") for url in urls
    ]
    inputs = processor(text=[llm.render(messages)], images=pixels, return_tensors="pt")
    with torch.inference_mode():
        logits = llm.engine.model(**inputs).logits[0, -1].float()
    expected = torch.log_softmax(logits, dim=-1)
    token = int(expected.argmax())
    assert first.bytes == llm.engine.token_piece(token)
    assert math.isclose(first.logprob, float(expected[token]), abs_tol=1e-4)


def test_a_text_only_model_refuses_an_image_by_its_field(tmp_path):
    llm = LLM.load(write_tiny_model(tmp_path / "tiny"), engine="transformers", engine_options=ON_CPU)
    try:
        assert llm.engine.input_modalities == ("text",)
        with pytest.raises(UnsupportedInput, match="takes no images") as info:
            llm.prepare(chat(picture(8)))
        assert info.value.param == IMAGE_FIELD
    finally:
        llm.close()


def test_continuous_batching_refuses_images_by_their_field(vision_dir):
    path, _ = vision_dir
    options = {**ON_CPU, "continuous_batching": True, "max_concurrency": 2, "n_ctx": 256}
    llm = LLM.load(str(path), engine="transformers", engine_options=options)
    try:
        assert llm.engine.input_modalities == ("text",)
        with pytest.raises(UnsupportedInput) as info:
            llm.prepare(chat(picture(9)))
        assert info.value.param == IMAGE_FIELD
        image = Image(IMAGE_FIELD, picture(9), "png", 40, 30)
        with pytest.raises(UnsupportedInput, match="continuous batching") as info:
            llm.engine.tokenize_prompt(llm.render(chat()).replace(QUESTION, QUESTION + "<image>"), [image])
        assert info.value.param == IMAGE_FIELD
        assert llm.generate(chat(), {"max_tokens": 2, "temperature": 0}).usage.completion_tokens >= 1
    finally:
        llm.close()


def test_a_bad_image_cache_size_is_named(vision_dir):
    path, _ = vision_dir
    with pytest.raises(InvalidParams) as info:
        LLM.load(str(path), engine="transformers", engine_options={**ON_CPU, "image_cache_mib": -1})
    assert info.value.problems[0].field == "image_cache_mib"
