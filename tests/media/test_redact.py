"""A trace records a request without its inline images' bytes."""

from __future__ import annotations

from llmflow.media.redact import without_image_data


def test_long_inline_images_are_shortened_and_the_rest_kept():
    uri = "data:image/png;base64," + "A" * 1000
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}]}],
        "input": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "B" * 900}}
        ],
        "short": "data:,x",
        "n": 2,
    }
    kept = without_image_data(body)
    assert kept["messages"][0]["content"][0]["image_url"]["url"] == "data:image/png;base64,<1022 characters>"
    assert kept["input"][0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "<900 characters of base64>",
    }
    assert (kept["model"], kept["short"], kept["n"]) == ("m", "data:,x", 2)
    assert body["messages"][0]["content"][0]["image_url"]["url"] == uri  # the request itself is untouched
