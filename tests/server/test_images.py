"""Images over HTTP on a real server around the embedded (text-only) model: every surface reads
them, a bad one is a 400 naming its field, an image URL is fetched only as the server allows,
and a good image is refused by the model, which reads text only. The server serves on after
each refusal."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from llmflow.server import ServedModel
from tests.media.images import bomb_png, data_uri, image_bytes, image_server
from tests.server.conftest import TIMEOUT_S, running

MIB = 1024 * 1024
#: hosts this test's servers fetch from: the local image server, and two it must never reach
HOSTS = ("127.0.0.1", "10.0.0.7", "169.254.169.254")


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with image_server() as base:
        yield base


@pytest.fixture(scope="module")
def served(embedded_llm) -> ServedModel:
    return ServedModel.from_llm(embedded_llm, "vision-less")


@pytest.fixture(scope="module")
def strict(served) -> Iterator[str]:
    """Image URLs from the allowed hosts, no private network opened; room for a 50 MB image."""
    with running(served, allow_image_urls=HOSTS, max_body_bytes=80 * MIB) as server:
        yield server.url


@pytest.fixture(scope="module")
def opened(served) -> Iterator[str]:
    """The same, with the loopback network opened explicitly (the image server is local), a
    second to fetch and a MiB per image."""
    settings = {
        "allow_image_urls": HOSTS,
        "allow_image_networks": ("127.0.0.0/8",),
        "image_url_timeout_s": 1.0,
        "max_image_bytes": MIB,
    }
    with running(served, **settings) as server:
        yield server.url


def chat(url: str, image: str, stream: bool = False) -> httpx.Response:
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": image}}]
    body = {"model": "vision-less", "messages": [{"role": "user", "content": content}], "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S)


def refused(response: httpx.Response, code: str, field: str, says: str, status: int = 400) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == (code, field), error
    assert says in error["message"], error


def still_serving(url: str) -> None:
    body = {"model": "vision-less", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text


def test_models_say_what_they_read(strict):
    listed = httpx.get(f"{strict}/v1/models").json()["data"]
    assert [card["input_modalities"] for card in listed] == [["text"]]
    assert httpx.get(f"{strict}/v1/models/vision-less").json()["input_modalities"] == ["text"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_text_only_model_refuses_an_image_naming_it(strict, stream):
    response = chat(strict, data_uri(image_bytes()), stream)
    refused(response, "unsupported_input", "messages[0].content[1]", "takes no images")


def test_the_openai_client_hears_the_same(strict):
    client = openai.OpenAI(base_url=f"{strict}/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)
    content = [{"type": "image_url", "image_url": {"url": data_uri(image_bytes("JPEG"), "image/jpeg")}}]
    with pytest.raises(openai.BadRequestError, match="takes no images") as info:
        client.chat.completions.create(model="vision-less", messages=[{"role": "user", "content": content}])
    assert info.value.body["param"] == "messages[0].content[0]"
    with pytest.raises(openai.BadRequestError, match="takes no images") as info:
        client.responses.create(
            model="vision-less",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is it?"},
                        {"type": "input_image", "image_url": data_uri(image_bytes("WEBP"), "image/webp")},
                    ],
                }
            ],
        )
    assert info.value.body["param"] == "input[0].content[1]"


def test_the_anthropic_client_hears_it_in_anthropics_shape(strict):
    client = anthropic.Anthropic(base_url=strict, api_key="x", max_retries=0, timeout=TIMEOUT_S)
    source = {
        "type": "base64",
        "media_type": "image/gif",
        "data": base64.b64encode(image_bytes("GIF")).decode(),
    }
    blocks = [{"type": "text", "text": "Look"}, {"type": "image", "source": source}]
    calls = [(client.messages.create, {"max_tokens": 8}), (client.messages.count_tokens, {})]
    for call, extra in calls:
        with pytest.raises(anthropic.BadRequestError, match="takes no images") as info:
            call(model="vision-less", messages=[{"role": "user", "content": blocks}], **extra)
        assert info.value.body["error"]["type"] == "invalid_request_error"
        assert "messages.0.content.1" in info.value.body["error"]["message"]


@pytest.mark.parametrize(
    ("image", "code", "says"),
    [
        ("data:image/png;base64,this is not base64!", "invalid_image", "not valid base64"),
        (data_uri(b"just some text, no image"), "invalid_image", "not an image"),
        (data_uri(image_bytes("BMP")), "invalid_image", "not an image in a supported format"),
        (data_uri(bomb_png()), "invalid_image", "pixels"),
        ("ftp://example.com/a.png", "invalid_messages", "data URI"),
    ],
)
def test_bad_images_are_400s_naming_the_part(strict, image, code, says):
    refused(chat(strict, image), code, "messages[0].content[1]", says)
    still_serving(strict)


def test_a_50_mb_image_is_refused(strict):
    huge = data_uri(b"\0" * (50 * MIB))
    refused(chat(strict, huge), "invalid_image", "messages[0].content[1]", "larger than 20 MiB")
    still_serving(strict)


def test_a_50_mb_image_over_the_body_limit_is_a_413(served):
    with running(served) as server:
        response = chat(server.url, data_uri(b"\0" * (50 * MIB)))
        assert response.status_code == 413, response.text
        still_serving(server.url)


def test_a_server_without_an_allowlist_fetches_nothing(served, site):
    with running(served) as server:
        refused(
            chat(server.url, f"{site}/image.png"), "invalid_image", "messages[0].content[1]", "no image URLs"
        )


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("http://127.0.0.1:9/a.png", "loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "link-local address"),
        ("http://10.0.0.7/a.png", "private address"),
        ("http://example.com/a.png", "not on its allowlist"),
    ],
)
def test_urls_to_private_places_are_refused(strict, path, says):
    refused(chat(strict, path), "invalid_image", "messages[0].content[1]", says)
    still_serving(strict)


def test_the_local_image_server_is_refused_as_loopback(strict, site):
    refused(chat(strict, f"{site}/image.png"), "invalid_image", "messages[0].content[1]", "loopback address")


def test_an_opened_network_is_fetched_and_the_image_reaches_the_model(opened, site):
    refused(
        chat(opened, f"{site}/image.png"), "unsupported_input", "messages[0].content[1]", "takes no images"
    )
    refused(
        chat(opened, f"{site}/redirect?to=/image.png"),
        "unsupported_input",
        "messages[0].content[1]",
        "takes no",
    )


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/redirect?to=http://10.0.0.7/a.png", "private address"),
        ("/redirect?to=http://169.254.169.254/latest/meta-data/", "link-local address"),
        ("/redirect?to=http://example.com/", "not on its allowlist"),
        ("/loop", "redirected more than 3 times"),
        ("/slow", "did not answer within 1 s"),
        ("/big", "larger than 1048576 bytes"),
        ("/text", "not an image"),
        ("/missing", "HTTP 404"),
    ],
)
def test_each_hop_and_the_limits_are_checked(opened, site, path, says):
    refused(chat(opened, f"{site}{path}"), "invalid_image", "messages[0].content[1]", says)
    still_serving(opened)


def _responses(url: str, image: str) -> httpx.Response:
    content = [{"type": "input_image", "image_url": image}]
    body = {"model": "vision-less", "input": [{"role": "user", "content": content}]}
    return httpx.post(f"{url}/v1/responses", json=body, timeout=TIMEOUT_S)


def _messages(url: str, source: dict[str, Any]) -> httpx.Response:
    body = {
        "model": "vision-less",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [{"type": "image", "source": source}]}],
    }
    return httpx.post(f"{url}/v1/messages", json=body, timeout=TIMEOUT_S)


def test_every_surface_fetches_and_refuses_alike(opened, site):
    redirect = f"{site}/redirect?to=http://10.0.0.7/a.png"
    refused(_responses(opened, redirect), "invalid_image", "input[0].content[0]", "private address")
    refused(_responses(opened, "data:image/png;base64,@@"), "invalid_image", "input[0].content[0]", "base64")
    refused(_responses(opened, f"{site}/image.png"), "unsupported_input", "input[0].content[0]", "takes no")
    for source, says in [
        ({"type": "url", "url": redirect}, "private address"),
        (
            {"type": "base64", "media_type": "image/png", "data": base64.b64encode(bomb_png()).decode()},
            "pixels",
        ),
        ({"type": "url", "url": f"{site}/image.png"}, "takes no images"),
    ]:
        response = _messages(opened, source)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "messages.0.content.0" in error["message"]
        assert says in error["message"], error
    still_serving(opened)
