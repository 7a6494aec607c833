"""A reasoning model's thinking split from its answer: the state machine on scripted text (tags
split across tokens anywhere), the streaming core over byte tokens, and a chat template that
opens <think>, in process and over HTTP with the official client."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai import OpenAI

from llmflow import LLM
from llmflow.prompts import ChatTemplate
from llmflow.server import ServerSettings, create_app
from llmflow.server.uvicorn_server import BackgroundServer
from llmflow.streaming import ByteDetokenizer, stream_chunks
from llmflow.streaming.reasoning import ReasoningSplitter, opens_thinking
from tests.fakes.scripted_engine import EOS, ScriptedEngine

#: the generation prompt of a DeepSeek-R1 distill / SmolLM3-style ChatML template: it opens the
#: thinking block itself, unless thinking is turned off (Qwen3's `enable_thinking`)
OPENING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
THOUGHT_THEN_ANSWER = "The user greets me. I greet back.\n</think>\n\nHello! 🏯 How can I help?"


def split(pieces, *, thinking=False):
    splitter = ReasoningSplitter(thinking=thinking)
    thought, answer = [], []
    for piece in pieces:
        r, c = splitter.feed(piece)
        thought.append(r)
        answer.append(c)
    r, c = splitter.flush()
    return "".join(thought) + r, "".join(answer) + c


@pytest.mark.parametrize(
    ("pieces", "thinking", "expected"),
    [
        (
            ["<th", "ink>", "\nI think", " so</th", "ink>\n\nAnswer", " here."],
            False,
            ("I think so", "Answer here."),
        ),
        (["  <think>", "a<", "b</", "think>", "c"], False, ("a<b", "c")),
        (["Let me", " see.</", "think", ">", "Hi"], True, ("Let me see.", "Hi")),
        (["Hello", " <think>x</think>"], False, ("", "Hello <think>x</think>")),
        (["<", "b>bold"], False, ("", "<b>bold")),
        (["<thi"], False, ("", "<thi")),  # a stream that ends on what looked like a tag
        (["\n", "  "], False, ("", "\n  ")),
        (["never closed <"], True, ("never closed <", "")),
        (["<think>", "</think>"], False, ("", "")),
        (["a</think>b</think>c"], True, ("a", "b</think>c")),  # only the first block is thinking
    ],
)
def test_splits_scripted_pieces(pieces, thinking, expected):
    assert split(pieces, thinking=thinking) == expected


@given(st.lists(st.integers(min_value=0, max_value=60), max_size=8))
def test_any_split_of_the_text_gives_the_same_result(cuts):
    text = "\n<think>\nweigh a</thin and b </think>\n\nanswer <think> stays"
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert split(pieces) == split([text]) == ("weigh a</thin and b ", "answer <think> stays")


def test_nothing_is_held_back_once_the_answer_started():
    splitter = ReasoningSplitter()
    assert splitter.feed("Hi") == ("", "Hi")
    assert splitter.feed("<") == ("", "<")


def test_opens_thinking():
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not opens_thinking("<|im_start|>assistant\n")


def test_streaming_core_splits_byte_tokens():
    """One token per byte: the tags and the emoji come split across tokens."""
    answer = ("<think>" + THOUGHT_THEN_ANSWER).encode()
    chunks = list(
        stream_chunks(
            iter([*answer, EOS]),
            ByteDetokenizer(lambda t: b"" if t == EOS else bytes([t])),
            stop=("help?",),
            max_tokens=1000,
            eos_token_ids={EOS},
            prompt_tokens=3,
            reasoning=ReasoningSplitter(),
        )
    )
    final = chunks[-1]
    assert final.finish_reason.value == "stop" and final.usage.completion_tokens < len(answer) + 1
    body = chunks[:-1]
    assert all((c.text == "") != (c.reasoning == "") for c in body)  # one or the other
    assert "".join(c.reasoning for c in body) == "The user greets me. I greet back.\n"
    assert "".join(c.text for c in body) == "Hello! 🏯 How can I "
    last_thought = max(i for i, c in enumerate(body) if c.reasoning)
    assert all(c.reasoning == "" for c in body[last_thought + 1 :])


def _thinking_llm() -> LLM:
    return LLM(ScriptedEngine(THOUGHT_THEN_ANSWER), ChatTemplate(OPENING_TEMPLATE))


def test_a_template_that_opens_think_in_process():
    llm = _thinking_llm()
    greedy = {"temperature": 0}
    parsed = list(llm.stream("Hi", greedy, reasoning_format="parsed"))
    plain = list(llm.stream("Hi", greedy))

    assert "".join(c.reasoning for c in parsed) == "The user greets me. I greet back.\n"
    assert "".join(c.text for c in parsed) == "Hello! 🏯 How can I help?"
    assert "".join(c.text for c in plain) == THOUGHT_THEN_ANSWER  # the default: as written
    assert all(c.reasoning == "" for c in plain)


def test_the_server_sends_thinking_as_reasoning_content():
    with BackgroundServer(create_app(_thinking_llm(), ServerSettings(model_name="thinker"))) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "Hi"}]
        stream = client.chat.completions.create(
            model="thinker", messages=messages, stream=True, temperature=0
        )
        deltas = [c.choices[0].delta for c in stream if c.choices]
        whole = client.chat.completions.create(model="thinker", messages=messages, temperature=0)
        off = client.chat.completions.create(
            model="thinker", messages=messages, temperature=0, reasoning_effort="none"
        )

    thought = "The user greets me. I greet back.\n"
    extra = [d.model_extra or {} for d in deltas]
    assert "".join(e.get("reasoning_content", "") for e in extra) == thought
    assert all(e.get("reasoning") == e.get("reasoning_content") for e in extra)
    assert "".join(d.content or "" for d in deltas) == "Hello! 🏯 How can I help?"
    assert not any(d.content and e.get("reasoning_content") for d, e in zip(deltas, extra, strict=True))
    message = whole.choices[0].message
    assert message.content == "Hello! 🏯 How can I help?"
    assert message.model_extra["reasoning_content"] == thought
    # reasoning_effort "none" reaches the template (enable_thinking=false): nothing is opened
    assert off.choices[0].message.content == THOUGHT_THEN_ANSWER


def test_reasoning_format_none_and_a_bad_effort():
    settings = ServerSettings(model_name="thinker", reasoning_format="none")
    with BackgroundServer(create_app(_thinking_llm(), settings)) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "Hi"}]
        whole = client.chat.completions.create(model="thinker", messages=messages, temperature=0)
        import httpx

        bad = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "thinker", "messages": messages, "reasoning_effort": "extreme"},
        )
    assert whole.choices[0].message.content == THOUGHT_THEN_ANSWER
    assert not (whole.choices[0].message.model_extra or {}).get("reasoning_content")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_effort"
