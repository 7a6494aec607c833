"""`tool_choice="auto"` in every format, on the embedded model's vocabulary (where the formats'
markers are text) and on that vocabulary with Llama 3's and Mistral's markers as control tokens
(as in those models), tokens fed by hand: free text is accepted and may end; once the answer
opens a call, whatever tokens the constraint lets through make calls whose arguments validate."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import numpy as np
import pytest

from llmflow.constraints.compiler import ConstraintCompiler
from llmflow.constraints.matcher import TokenMatcher
from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.errors import EngineFailed
from llmflow.tools import parse_tools, split_answer
from llmflow.tools.formats import HermesFormat, Llama3Format, MistralFormat, ToolCallFormat
from tests.server.tool_schemas import SCHEMAS, TIME, WEATHER

TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
    ]
)
FORMATS = [ToolCallFormat(), HermesFormat(), Llama3Format(), MistralFormat()]
#: the embedded vocabulary's control tokens renamed to these formats' markers
CONTROL_MARKERS = {5: "<|python_tag|>", 6: "[TOOL_CALLS]"}
TEXTS = ["Sure, it is sunny in Osaka.", "I cannot tell.\nSorry!"]
#: per format: how an answer may open a call (the random walk goes on from there)
OPENINGS = {
    "generic": ['{"tool_calls": ['],
    "hermes": ["<tool_call>", "Let me look that up.\n<tool_call>\n"],
    "llama3": ["{", "<|python_tag|>", '<|python_tag|>{"name": "get_'],
    "mistral": ["[", "[TOOL_CALLS]", '[TOOL_CALLS][{"name": "get_time", '],
}


def one_call(fmt: ToolCallFormat, arguments: str) -> str:
    """A whole answer with one call to get_weather, as `fmt` writes it."""
    call = f'{{"name": "get_weather", "{fmt.arguments_key}": {arguments}}}'
    return {
        "generic": f'{{"tool_calls": [{call}]}}',
        "hermes": f"Checking.\n<tool_call>\n{call}\n</tool_call>",
        "llama3": f"<|python_tag|>{call}",
        "mistral": f"[TOOL_CALLS][{call}]",
    }[fmt.name]


@pytest.fixture(scope="module")
def vocabulary(embedded_llm) -> TokenVocabulary:
    return embedded_llm.engine.token_vocabulary()


@pytest.fixture(scope="module")
def compiler(vocabulary) -> ConstraintCompiler:
    return ConstraintCompiler(vocabulary)


@pytest.fixture(scope="module")
def marker_compiler(vocabulary) -> ConstraintCompiler:
    """A vocabulary whose control tokens include Llama 3's and Mistral's markers."""
    tokens = list(vocabulary.tokens)
    for token, marker in CONTROL_MARKERS.items():
        assert token in vocabulary.special_ids
        tokens[token] = marker.encode()
    return ConstraintCompiler(dataclasses.replace(vocabulary, tokens=tokens))


def start(compiler: ConstraintCompiler, fmt: ToolCallFormat, parallel: bool = True) -> TokenMatcher:
    constraint = fmt.auto_constraint(TOOLS, parallel, "tools", compiler.vocabulary.control_token)
    return compiler.compile(constraint).start()


def feed(matcher: TokenMatcher, vocabulary: TokenVocabulary, text: str) -> bool:
    """Whether the constraint takes `text` (tokenized as the model would write it)."""
    try:
        for token in vocabulary.encode(text.encode()):
            matcher.advance(token)
    except EngineFailed:
        return False
    return True


def may_end(matcher: TokenMatcher, vocabulary: TokenVocabulary) -> bool:
    return bool(matcher.allowed()[sorted(vocabulary.eos_token_ids)].any())


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("parallel", [True, False])
def test_free_text_is_accepted(compiler, vocabulary, fmt, parallel):
    for text in TEXTS:
        matcher = start(compiler, fmt, parallel)
        assert feed(matcher, vocabulary, text), text
        assert may_end(matcher, vocabulary)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_a_valid_call_is_accepted_and_ends_the_answer(compiler, vocabulary, fmt):
    answer = one_call(fmt, '{"city": "Osaka", "unit": "celsius", "days": 3}')
    matcher = start(compiler, fmt, parallel=False)
    assert feed(matcher, vocabulary, answer)
    assert matcher.complete
    content, calls = split_answer(answer, fmt)
    assert [c.name for c in calls] == ["get_weather"] and content in ("", "Checking.\n")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Osaka", "unit": "kelvin", "days": 3}', '{"city": "Osaka", "days": 9}', '{"town": 1}'],
)
def test_a_started_call_with_invalid_arguments_is_refused(compiler, vocabulary, fmt, arguments):
    assert not feed(start(compiler, fmt), vocabulary, one_call(fmt, arguments))


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (HermesFormat(), "Sure <tool_call> whatever"),
        (HermesFormat(), "<tool_call>\n{not a call}"),
        (ToolCallFormat(), "{not a call}"),
    ],
    ids=lambda v: v.name if isinstance(v, ToolCallFormat) else None,
)
def test_once_a_call_opens_only_calls_may_follow(compiler, vocabulary, fmt, text):
    assert not feed(start(compiler, fmt), vocabulary, text)


def test_leading_whitespace_cannot_hide_an_opener(compiler, vocabulary):
    """In the formats whose calls open the answer, text may not start with whitespace (else a
    model could write ` {...}` unconstrained)."""
    assert not feed(start(compiler, ToolCallFormat()), vocabulary, " x")


@pytest.mark.parametrize("fmt", [Llama3Format(), MistralFormat()], ids=lambda f: f.name)
def test_a_control_token_marker_opens_calls(marker_compiler, fmt):
    """Where the model's vocabulary has the marker as a control token, the model may open its
    calls with that token (after which only calls follow), and free text still may end."""
    (token,) = [t for t, m in CONTROL_MARKERS.items() if m == fmt.markers[0]]
    vocabulary = marker_compiler.vocabulary
    text = start(marker_compiler, fmt)
    assert feed(text, vocabulary, TEXTS[0]) and may_end(text, vocabulary)
    assert not text.allows(token)  # text never holds a control token
    calls = start(marker_compiler, fmt)
    assert calls.allows(token)
    calls.advance(token)
    assert not feed(calls, vocabulary, "Sure")
    call = start(marker_compiler, fmt, parallel=False)
    call.advance(token)
    assert feed(
        call,
        vocabulary,
        one_call(fmt, '{"city": "Osaka", "unit": "celsius", "days": 3}').removeprefix(fmt.markers[0]),
    )
    assert call.complete


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_any_tokens_after_an_opening_make_valid_calls(compiler, vocabulary, fmt, parallel, seed):
    """After the opening, random tokens among those the constraint allows (the worst a model can
    do) always make calls that validate; the answer may end only once a call closed."""
    rng = np.random.default_rng(seed)
    opening = OPENINGS[fmt.name][seed % len(OPENINGS[fmt.name])]
    matcher = start(compiler, fmt, parallel)
    assert feed(matcher, vocabulary, opening)
    pieces = [opening.encode()]
    eos = sorted(vocabulary.eos_token_ids)
    for _ in range(400):
        allowed = matcher.allowed()[: len(vocabulary.tokens)]
        if allowed[eos].any():
            break
        token = int(rng.choice(np.flatnonzero(allowed)))
        matcher.advance(token)
        pieces.append(vocabulary.tokens[token])
    else:
        pytest.fail("the constraint never let the answer end")
    answer = b"".join(pieces).decode()
    _, calls = split_answer(answer, fmt)
    assert calls, answer
    assert parallel or len(calls) == 1
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
