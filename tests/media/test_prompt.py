"""`MediaPrompt`: a prompt's ids with its images' spans, and what prefix reuse may keep of it."""

from __future__ import annotations

import pytest

from llmflow.engines.base import Engine
from llmflow.errors import UnsupportedInput
from llmflow.media.prompt import MediaPrompt, PromptImage, image_ids, is_image_id, media_images, whole_images
from llmflow.types import Image


def image(data: bytes) -> Image:
    return Image("messages[0].content[0]", data, "png", 8, 8)


def test_image_ids_are_negative_and_name_the_image_and_its_chunk():
    a, b = image(b"a"), image(b"b")
    assert all(is_image_id(t) for t in image_ids(a, 4))
    assert image_ids(a, 4) == image_ids(image(b"a"), 4)
    assert image_ids(a, 4) != image_ids(b, 4)
    assert image_ids(a, 4, part=1) != image_ids(a, 4)
    assert len(set(image_ids(a, 4))) == 4


def test_a_kept_prefix_never_ends_inside_an_image():
    span = PromptImage(3, 4, image(b"a"))
    prompt = MediaPrompt([1, 2, 3, *image_ids(span.image, 4), 9, 10], [span])
    assert len(prompt) == 9 and list(prompt[:3]) == [1, 2, 3]
    assert media_images(prompt) == (span,)
    assert [whole_images(prompt, n) for n in range(10)] == [0, 1, 2, 3, 3, 3, 3, 7, 8, 9]
    assert whole_images([1, 2, 3], 2) == 2 and media_images([1, 2, 3]) == ()


def test_an_engine_that_reads_no_images_refuses_them_by_field(embedded_llm):
    engine: Engine = embedded_llm.engine
    assert engine.image_marker is None
    assert list(engine.tokenize_prompt("Hi", [])) == engine.tokenize("Hi")
    with pytest.raises(UnsupportedInput) as refused:
        engine.tokenize_prompt("Hi", [image(b"a")])
    assert refused.value.problems[0].field == "messages[0].content[0]"
