"""`LLM.prepare` and images: a model without `image` among its inputs refuses one, naming its
field; a model that reads images gets them read and checked, and its template sees each where
the request put it."""

from __future__ import annotations

import pytest

from llmflow import LLM
from llmflow.errors import InvalidImage, UnsupportedInput
from llmflow.prompts import ChatTemplate
from tests.fakes.scripted_engine import ScriptedEngine
from tests.media.images import data_uri, image_bytes

TEMPLATE = ChatTemplate(
    "{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}"
    "{% endfor %}{% endif %}\n{% endfor %}"
)


class SeeingEngine(ScriptedEngine):
    """The scripted engine, saying it reads images."""

    @property
    def input_modalities(self) -> tuple[str, ...]:
        return ("text", "image")


def _messages(url: str) -> list[dict]:
    parts = [{"type": "text", "text": "see "}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def test_a_text_only_model_refuses_an_image_by_its_field():
    llm = LLM(ScriptedEngine(), TEMPLATE)
    with pytest.raises(UnsupportedInput, match="takes no images") as info:
        llm.prepare(_messages(data_uri(image_bytes())))
    assert info.value.param == "messages[0].content[1]"
    with pytest.raises(UnsupportedInput):  # a URL too: nothing is fetched for a model that reads none
        llm.render(_messages("https://example.com/a.png"))


def test_a_model_that_reads_images_gets_them_checked_and_in_place():
    llm = LLM(SeeingEngine(), TEMPLATE)
    assert llm.render(_messages(data_uri(image_bytes("JPEG")))) == "user:see <image>"
    with pytest.raises(InvalidImage, match="not an image") as info:
        llm.prepare(_messages(data_uri(b"text")))
    assert info.value.param == "messages[0].content[1]"
    with pytest.raises(InvalidImage, match="fetched only by a server"):
        llm.prepare(_messages("https://example.com/a.png"))
