"""Tool-call formats without a model: each format's calls are found in its text, however the text
is split into chunks, and a streamed call joined equals the call read from the whole text."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmflow.prompts import ChatTemplate
from llmflow.tools import ToolCallChunk, format_for, parse_tool_choice, parse_tools, split_answer, tool_stream
from llmflow.tools.formats import HermesFormat, Llama3Format, MistralFormat, ToolCallFormat
from llmflow.types import Chunk, FinishReason, Usage

ARGS = '{"city": "Os\\"aka {x}", "days": [1, {"n": 2}]}'
A = f'{{"name": "a", "arguments": {ARGS}}}'
B = '{"name": "b", "arguments": {}}'
TEXTS = {
    "generic": (ToolCallFormat(), f'{{"tool_calls": [{A}, {B}]}}', ""),
    "hermes": (
        HermesFormat(),
        f"Let me look.\n<tool_call>\n{A}\n</tool_call>\n<tool_call>\n{B}\n</tool_call>",
        "Let me look.\n",
    ),
    "llama3": (
        Llama3Format(),
        f'{{"name": "a", "parameters": {ARGS}}}; {{"name": "b", "parameters": {{}}}}',
        "",
    ),
    "mistral": (MistralFormat(), f'[{A}, {{"arguments": {{}}, "name": "b"}}]', ""),
}
EXPECTED = [("a", ARGS), ("b", "{}")]


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_calls_are_found(name):
    fmt, text, content = TEXTS[name]
    found_content, calls = split_answer(text, fmt)
    assert found_content == content
    assert [(c.name, c.arguments) for c in calls] == EXPECTED
    assert len({c.id for c in calls}) == 2


@given(name=st.sampled_from(sorted(TEXTS)), cuts=st.lists(st.integers(1, 400), max_size=30))
def test_streamed_calls_join_to_the_whole_calls(name, cuts):
    fmt, text, content = TEXTS[name]
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    chunks = [Chunk(text[a:b]) for a, b in itertools.pairwise(bounds)]
    items = list(tool_stream(iter([*chunks, Chunk("", FinishReason.STOP, Usage(1, 1))]), fmt))
    assert items[-1].finish_reason is FinishReason.STOP
    texts = "".join(i.text for i in items[:-1] if isinstance(i, Chunk))
    calls: dict[int, list[str]] = {}
    for item in items:
        if isinstance(item, ToolCallChunk):
            if item.name is not None:
                assert item.index not in calls and item.id is not None
                calls[item.index] = [item.name, ""]
            calls[item.index][1] += item.arguments
    assert texts == content
    assert [tuple(v) for _, v in sorted(calls.items())] == EXPECTED


def test_plain_text_is_text():
    for fmt, _, _ in TEXTS.values():
        assert split_answer("Sunny, 21 degrees.", fmt) == ("Sunny, 21 degrees.", [])


def test_a_cut_call_is_text():
    text = '{"tool_calls": [{"name": "a", "arguments": {"ci'
    assert split_answer(text, ToolCallFormat()) == (text, [])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ messages }}", ToolCallFormat),
        ("{% if tools %}<tool_call>{% endif %}", HermesFormat),
        ("{% if tools %}[TOOL_CALLS]{% endif %}", MistralFormat),
        ("{% if tools %}<|start_header_id|>ipython{% endif %}", Llama3Format),
    ],
)
def test_format_follows_the_template(source, expected):
    assert type(format_for(ChatTemplate(source))) is expected


def test_tools_and_choices_are_checked():
    tools = parse_tools([{"type": "function", "function": {"name": "f"}}])
    assert tools[0].parameters == {"type": "object", "properties": {}}
    assert parse_tool_choice(None, tools).mode == "auto"
    assert parse_tool_choice(None, ()).mode == "none"
    assert parse_tool_choice('{"type": "function", "function": {"name": "f"}}', tools).name == "f"
    with pytest.raises(Exception, match=r"tools\[0\].function.name"):
        parse_tools([{"type": "function", "function": {"name": "has space"}}])
    with pytest.raises(Exception, match="tool_choice"):
        parse_tool_choice("sometimes", tools)


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (Llama3Format(), f'<|python_tag|>{{"name": "a", "parameters": {ARGS}}}'),
        (MistralFormat(), f"[TOOL_CALLS][{A}]"),
    ],
    ids=["llama3", "mistral"],
)
def test_a_marker_written_as_text_opens_the_calls(fmt, text):
    """Where the vocabulary has no control token for the marker, the model writes it as text."""
    content, calls = split_answer(text, fmt)
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("a", ARGS)]
    streamed = list(tool_stream(iter([Chunk(text[:5]), Chunk(text[5:]), Chunk("", FinishReason.STOP)]), fmt))
    assert not [c for c in streamed[:-1] if isinstance(c, Chunk)]
