"""A draft model on both llama.cpp engines: the embedded model drafts for itself (the same
vocabulary, and a draft it almost always agrees with), so every comparison is two runs on this
machine, draft off against on; greedy text itself is never pinned (it differs between builds)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from scipy.stats import chi2_contingency

from llmflow import LLM, CancelToken, FinishReason
from llmflow.constraints import Constraint
from llmflow.errors import InvalidParams
from llmflow.model_files import default_model_path
from tests.engines.test_llama_cpp_speculation import both, counts
from tests.engines.test_llama_cpp_speculation import load as load_speculating

CHATS = [
    "Name three colors.",
    "Write a haiku about the sea.",
    "Tell me a story about a dragon.",
    "Explain photosynthesis to a child.",
    "大阪の観光名所をひとつ教えて。",
]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"


def load(engine: str, **options) -> LLM:
    """The engine as the speculation tests load it, drafting with the embedded model."""
    return load_speculating(engine, **{"draft_model": str(default_model_path()), **options})


@pytest.fixture(scope="module")
def llm(engine_name):
    loaded = load(engine_name)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("prompt", CHATS)
def test_greedy_text_is_identical_and_the_drafts_are_taken(llm, prompt):
    before = counts(llm)
    off, on = both(llm, prompt, {"temperature": 0, "max_tokens": 64})
    proposed, accepted = (a - b for a, b in zip(counts(llm), before, strict=True))
    assert on.text == off.text
    assert on.finish_reason is off.finish_reason
    assert on.usage.completion_tokens == off.usage.completion_tokens
    # the model drafting for itself agrees with itself: most tokens come from accepted drafts
    # (a draft that runs past the answer's end is the one that is rejected)
    assert proposed >= accepted >= 0.5 * on.usage.completion_tokens


@pytest.mark.parametrize("draft_max", [1, 3, 12])
def test_any_draft_length_gives_the_same_text(engine_name, draft_max):
    llm = load(engine_name, draft_max=draft_max)
    try:
        off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 40}, raw=True)
    finally:
        llm.close()
    assert on.text == off.text


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_sampling_gives_the_same_tokens(llm, seed):
    params = {"temperature": 0.9, "seed": seed, "max_tokens": 48, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    off, on = both(llm, "Tell me a story about a dragon.", params)
    assert on.text == off.text


def test_sampled_output_follows_the_same_distribution(engine_name):
    """Different seeds on each side: the continuations' distribution is the same (chi-square)."""
    llm = load(engine_name, prompt_cache=True)
    prompt = "red, green, blue, " * 6 + "red, green,"
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 4}
    draws = 60
    try:
        before = counts(llm)
        off = Counter(
            llm.generate(prompt, {**params, "seed": s, "speculative": False}, raw=True).text
            for s in range(draws)
        )
        on = Counter(
            llm.generate(prompt, {**params, "seed": 10_000 + s, "speculative": True}, raw=True).text
            for s in range(draws)
        )
        accepted = counts(llm)[1] - before[1]
    finally:
        llm.close()
    assert accepted > 0, "no draft was accepted: the test measures nothing"
    common = [text for text, n in (off + on).most_common() if n >= 8]
    table = [[off[t] for t in common] + [draws - sum(off[t] for t in common)]]
    table.append([on[t] for t in common] + [draws - sum(on[t] for t in common)])
    table = [row for row in zip(*table, strict=True) if sum(row) > 0]
    assert len(table) >= 2
    assert chi2_contingency(list(zip(*table, strict=True))).pvalue > 0.001


def test_stops_limits_constraints_logprobs_and_cancelling_behave_as_without(llm):
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 60, "stop": [" 8,"]}, raw=True)
    assert on.finish_reason is off.finish_reason is FinishReason.STOP and on.text == off.text
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 5}, raw=True)
    assert on.finish_reason is off.finish_reason is FinishReason.LENGTH
    assert on.usage.completion_tokens == off.usage.completion_tokens == 5
    constraint = Constraint.regex(r" 4, 9(9, 9)*9?")
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 12}, raw=True, constraint=constraint)
    assert on.text == off.text and on.text.startswith(" 4, 9")
    off, on = both(llm, COUNTING, {"temperature": 0, "max_tokens": 24, "logprobs": 3}, raw=True)
    assert on.logprobs == off.logprobs

    def until_cancelled(speculative: bool) -> str:
        cancel, pieces = CancelToken(), []
        for chunk in llm.stream(
            COUNTING,
            {"temperature": 0, "max_tokens": 60, "speculative": speculative},
            raw=True,
            cancel=cancel,
        ):
            pieces.append(chunk.text)
            if len("".join(pieces)) >= 12:
                cancel.cancel()
        return "".join(pieces)

    assert until_cancelled(True) == until_cancelled(False)


def test_a_request_that_opts_out_proposes_nothing(llm):
    before = counts(llm)
    llm.generate(COUNTING, {"temperature": 0, "max_tokens": 20, "speculative": False}, raw=True)
    assert counts(llm) == before


def test_the_next_turn_reuses_the_draft_models_context(engine_name):
    """A second turn that extends the first: the draft context keeps what it read and the text is
    still what decoding without a draft gives."""
    cached = load(engine_name, prompt_cache=True)
    try:
        first = cached.generate(COUNTING, {"temperature": 0, "max_tokens": 30}, raw=True)
        follow = COUNTING + first.text + " and again: 1, 2,"
        off, on = both(cached, follow, {"temperature": 0, "max_tokens": 30}, raw=True)
    finally:
        cached.close()
    assert on.text == off.text


@pytest.mark.parametrize("engine", ["llama_cpp", "llama_cpp_batched"])
def test_a_missing_draft_file_is_an_error_naming_the_option(engine, tmp_path):
    with pytest.raises(InvalidParams) as error:
        load(engine, draft_model=str(tmp_path / "nowhere.gguf"))
    assert error.value.problems[0].field == "draft_model"


@pytest.mark.parametrize("engine", ["llama_cpp", "llama_cpp_batched"])
def test_a_draft_of_another_vocabulary_is_refused(engine, tmp_path):
    other = _with_one_token_renamed(default_model_path(), tmp_path / "other-vocab.gguf")
    with pytest.raises(InvalidParams) as error:
        load(engine, draft_model=str(other))
    assert error.value.problems[0].field == "draft_model"
    assert "vocabulary" in error.value.problems[0].message


def test_concurrent_streams_each_get_their_own_drafts_and_text():
    """Six prompts at once on four sequences (slots taken again by later prompts): each answer is
    what it is without drafts, and the draft model proposes for all of them."""
    llm = load("llama_cpp_batched")
    prompts = [*CHATS, COUNTING]
    params = {"temperature": 0, "max_tokens": 48}
    try:
        off = [llm.generate(p, {**params, "speculative": False}, raw=True).text for p in prompts]
        before = counts(llm)
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = pool.map(lambda p: llm.generate(p, {**params, "speculative": True}, raw=True), prompts)
            on = [answer.text for answer in answers]
        proposed, accepted = (a - b for a, b in zip(counts(llm), before, strict=True))
    finally:
        llm.close()
    assert on == off
    assert proposed >= accepted > 0


def _with_one_token_renamed(source: Path, out: Path) -> Path:
    """A copy of a GGUF model whose vocabulary differs in one token's text."""
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.name == gguf.Keys.Tokenizer.LIST:
            value[1000] = "\u2581renamed-token"
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, kind, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
