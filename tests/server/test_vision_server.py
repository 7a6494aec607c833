"""Images over HTTP into a model that reads them: the project's tiny random SmolVLM on the
batching llama.cpp engine with its projector, behind a real server. Every surface (OpenAI chat
with the official client, streamed or not, Responses, Anthropic Messages, an image URL the
server may fetch) gets the image to the model: its prompt grows by the image's positions."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from llmflow import LLM
from llmflow.server import ServedModel
from tests.media.images import data_uri, image_bytes, image_server
from tests.server.conftest import TIMEOUT_S, running

NAME = "tiny-vlm"


@pytest.fixture(scope="module")
def url(vision_model) -> Iterator[str]:
    folder, _ = vision_model
    options = {"mmproj": str(folder / "mmproj-vision-f16.gguf"), "n_ctx": 512}
    llm = LLM.load(str(folder / "vision-f16.gguf"), engine="llama_cpp_batched", engine_options=options)
    settings = {"allow_image_urls": ("127.0.0.1",), "allow_image_networks": ("127.0.0.0/8",)}
    try:
        with running(ServedModel.from_llm(llm, NAME), **settings) as server:
            yield server.url
    finally:
        llm.close()


@pytest.fixture(scope="module")
def client(url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=TIMEOUT_S)


def _content(image: str | None) -> list[dict]:
    parts: list[dict] = [{"type": "text", "text": "What is this?"}]
    return parts + ([{"type": "image_url", "image_url": {"url": image}}] if image else [])


def _prompt_tokens(client: openai.OpenAI, image: str | None) -> int:
    messages = [{"role": "user", "content": _content(image)}]
    answer = client.chat.completions.create(model=NAME, messages=messages, max_tokens=3, temperature=0)
    return answer.usage.prompt_tokens


@pytest.fixture(scope="module")
def grows(client) -> int:
    """How many prompt tokens one image adds (its positions and the tokens around them)."""
    added = _prompt_tokens(client, data_uri(image_bytes())) - _prompt_tokens(client, None)
    assert added > 0
    return added


def test_the_model_card_says_it_reads_images(url):
    card = httpx.get(f"{url}/v1/models/{NAME}", timeout=TIMEOUT_S).json()
    assert card["input_modalities"] == ["text", "image"]


def test_chat_streams_an_answer_about_an_image(client, grows):
    messages = [{"role": "user", "content": _content(data_uri(image_bytes(size=(5, 5))))}]
    stream = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].usage.prompt_tokens == _prompt_tokens(client, None) + grows
    assert chunks[-1].usage.completion_tokens > 0


def test_two_images_add_twice_as_much(client, grows):
    messages = [
        {
            "role": "user",
            "content": [*_content(data_uri(image_bytes())), *_content(data_uri(image_bytes()))[1:]],
        }
    ]
    answer = client.chat.completions.create(model=NAME, messages=messages, max_tokens=2)
    assert answer.usage.prompt_tokens == _prompt_tokens(client, None) + 2 * grows


def test_responses_and_messages_take_the_image_too(url, grows):
    picture = image_bytes(size=(6, 4))
    body = {
        "model": NAME,
        "max_output_tokens": 3,
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": data_uri(picture)}]}],
    }
    response = httpx.post(f"{url}/v1/responses", json=body, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["input_tokens"] > grows
    claude = anthropic.Anthropic(base_url=url, api_key="none", timeout=TIMEOUT_S)
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(picture).decode()}
    message = claude.messages.create(
        model=NAME,
        max_tokens=3,
        messages=[{"role": "user", "content": [{"type": "image", "source": source}]}],
    )
    # Anthropic counts the prompt tokens read from the conversation cache apart
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens > grows


def test_an_allowed_image_url_is_fetched_for_the_model(client, grows):
    with image_server() as site:
        assert _prompt_tokens(client, f"{site}/image.png") == _prompt_tokens(client, None) + grows


def test_a_bad_image_is_a_400_and_the_model_serves_on(client):
    with pytest.raises(openai.BadRequestError) as error:
        _prompt_tokens(client, "data:image/png;base64,AAAA")
    assert error.value.body["param"] == "messages[0].content[1]"
    assert _prompt_tokens(client, data_uri(image_bytes())) > 0


def test_metrics_count_encoded_and_reused_images(url, client):
    picture = data_uri(image_bytes(size=(3, 7)))
    for text in ("What is this?", "And now?"):  # two conversations, one image
        messages = [{"role": "user", "content": [{"type": "text", "text": text}, _content(picture)[1]]}]
        client.chat.completions.create(model=NAME, messages=messages, max_tokens=2)
    metrics = httpx.get(f"{url}/metrics", timeout=TIMEOUT_S).text
    counts = {
        outcome: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        for outcome in ("encoded", "reused")
        if line.startswith(f'llmflow_image_chunks_total{{model="{NAME}",outcome="{outcome}"}}')
    }
    assert counts["encoded"] > 0 and counts["reused"] > 0
    assert f'llmflow_image_cache_bytes{{model="{NAME}"}}' in metrics
