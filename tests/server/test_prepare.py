"""Which requests the server prepares on its event loop (a short prompt of text: less work than
the hop to a worker thread) and which in a worker thread (long prompts, images, schemas)."""

from __future__ import annotations

from dataclasses import replace

from llmflow.constraints import Constraint
from llmflow.server.openai import INLINE_PROMPT_CHARS, _small
from llmflow.types import Message

SHORT = [Message("system", "Be brief."), Message("user", "Why do refunds matter to a shop?")]


def test_a_short_prompt_of_text_is_prepared_on_the_loop():
    assert _small(SHORT, None, {})
    assert _small("Once upon a time", None, {"constraint": None, "tools": None})
    assert _small([Message("user", "x" * INLINE_PROMPT_CHARS)], None, {})


def test_a_long_prompt_goes_to_a_worker_thread():
    assert not _small([*SHORT, Message("user", "x" * INLINE_PROMPT_CHARS)], None, {})
    assert not _small("x" * (INLINE_PROMPT_CHARS + 1), None, {})


def test_images_schemas_and_tools_go_to_a_worker_thread():
    with_image = replace(SHORT[1], parts=(SHORT[1].content, object()))
    assert not _small([SHORT[0], with_image], None, {})
    assert not _small(SHORT, None, {"constraint": Constraint.json_object("response_format")})
    assert not _small(SHORT, None, {"tools": [{"type": "function", "function": {"name": "f"}}]})
