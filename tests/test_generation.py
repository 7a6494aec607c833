"""The generation object: one request's typed events and its record, with n choices and
function calls split from the text inside it (on a scripted engine: no model needed)."""

from __future__ import annotations

from llmflow.generation import CallDelta, ChoiceEnd, Final, GenerationRequest, Text
from llmflow.llm import LLM
from llmflow.observability import RequestTimings
from llmflow.tools.formats import HermesFormat
from llmflow.types import CancelToken, FinishReason
from tests.fakes.scripted_engine import ScriptedEngine

CALL = 'Let me check.<tool_call>\n{"name": "weather", "arguments": {"city": "Osaka"}}\n</tool_call>'


def events_of(llm: LLM, n: int = 1, calls=None, **params):
    prepared = llm.prepare("Hi", {"temperature": 0.0, **params})
    return list(llm.start(GenerationRequest(prepared, n, calls)))


def test_one_choice_text_then_its_end_then_the_record():
    llm = LLM(ScriptedEngine("Osaka Castle."))
    events = events_of(llm)
    *texts, end, final = events
    assert all(type(e) is Text for e in texts)
    assert "".join(e.text for e in texts) == "Osaka Castle."
    assert end == ChoiceEnd(0, "stop", end.usage) and end.usage.completion_tokens == len("Osaka Castle.") + 1
    assert type(final) is Final
    record = final.record
    assert [c.text for c in record.choices] == ["Osaka Castle."]
    assert record.usage == end.usage and record.last_finish is FinishReason.STOP
    assert record.final_chunk.usage == end.usage


def test_max_tokens_ends_with_length():
    events = events_of(LLM(ScriptedEngine("abcdefgh")), max_tokens=3)
    end = events[-2]
    assert end.finish == "length" and events[-1].record.choices[0].text == "abc"


def test_n_choices_each_end_and_the_usage_counts_the_prompt_once():
    llm = LLM(ScriptedEngine("abc"))
    events = events_of(llm, n=3)
    ends = [e for e in events if type(e) is ChoiceEnd]
    assert sorted(e.choice for e in ends) == [0, 1, 2]
    record = events[-1].record
    assert [c.text for c in record.choices] == ["abc"] * 3
    assert record.usage.prompt_tokens == ends[0].usage.prompt_tokens
    assert record.usage.completion_tokens == sum(e.usage.completion_tokens for e in ends)


def test_calls_are_split_from_the_text_and_finish_with_tool_calls():
    llm = LLM(ScriptedEngine(CALL))
    events = events_of(llm, calls=HermesFormat())
    text = "".join(e.text for e in events if type(e) is Text)
    deltas = [e for e in events if type(e) is CallDelta]
    assert text == "Let me check."
    assert deltas[0].name == "weather" and deltas[0].id is not None
    assert "".join(d.arguments for d in deltas) == '{"city": "Osaka"}'
    assert events[-2].finish == "tool_calls"
    [choice] = events[-1].record.choices
    assert choice.text == "Let me check." and [c.name for c in choice.calls] == ["weather"]
    assert choice.calls[0].id == deltas[0].id  # the streamed call and the recorded one are the same call


def test_a_call_cut_short_is_text_in_the_record():
    llm = LLM(ScriptedEngine(CALL))  # cut inside the call's arguments
    events = events_of(llm, calls=HermesFormat(), max_tokens=30)
    [choice] = events[-1].record.choices
    assert events[-2].finish == "length" and choice.calls == []
    assert choice.text == CALL[:30]


def test_closing_a_generation_stops_the_engine():
    engine = ScriptedEngine("x" * 200)
    llm = LLM(engine)
    generation = llm.start(GenerationRequest(llm.prepare("Hi", {"temperature": 0.0})), CancelToken())
    next(generation)
    generation.close()
    assert engine.tokens_generated < 10


def test_the_record_carries_the_requests_timings():
    llm = LLM(ScriptedEngine("ab"))
    timings = RequestTimings()
    events = list(llm.start(GenerationRequest(llm.prepare("Hi")), timings=timings))
    assert events[-1].record.timings is timings
