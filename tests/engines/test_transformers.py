"""The transformers engine on the CPU, beyond the shared conformance suite: options, the static
cache path, sampling, continuous batching, detokenization. A tiny random Llama with a byte-level
tokenizer keeps these fast; the real model runs in tests/conformance."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.extras import missing

pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))

from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow import LLM, CancelToken, FinishReason
from llmflow.engines import guess_engine
from llmflow.engines.hf import TransformersEngine
from llmflow.errors import EngineUnavailable, InvalidParams, ModelNotFound
from llmflow.llm import collect
from llmflow.streaming.hf_detokenizer import DecodeStreamDetokenizer, OffsetDetokenizer
from tests.fakes.hf_models import byte_tokenizer, write_tiny_model

PROMPT = "Tell me about Osaka."
#: this file is about the CPU path: on a machine with CUDA, "auto" would pick the GPU (whose own
#: tests are test_transformers_gpu.py)
ON_CPU = {"device": "cpu"}
LONG = {"temperature": 0.0, "max_tokens": 24}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-hf") / "tiny")


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    llm = LLM.load(tiny_dir, engine_options={**ON_CPU, "ignore_eos": True})
    yield llm
    llm.close()


def test_a_model_directory_picks_the_transformers_engine(tiny_dir, tiny):
    assert guess_engine(tiny_dir) == "transformers"
    engine = tiny.engine
    assert isinstance(engine, TransformersEngine)
    assert str(engine.placement.device) == "cpu" and str(engine.placement.dtype) == "torch.float32"
    assert not engine.placement.static_cache and not engine.concurrent and engine.max_concurrency == 1
    assert engine.n_ctx == 2048


def test_importing_llmflow_and_the_engine_module_does_not_import_torch():
    code = "import llmflow, llmflow.engines.hf, llmflow.streaming, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_options_are_named(tiny_dir):
    with pytest.raises(InvalidParams) as info:
        LLM.load(tiny_dir, engine="transformers", engine_options={"dtype": "int3", "bogus": 1})
    assert {p.field for p in info.value.problems} == {"dtype", "bogus"}
    with pytest.raises(InvalidParams):
        LLM.load(
            tiny_dir, engine="transformers", engine_options={"torch_compile": True, "static_cache": False}
        )


def test_cuda_without_a_gpu_is_a_clear_error(tiny_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(EngineUnavailable, match="CUDA"):
        LLM.load(tiny_dir, engine="transformers", engine_options={"device": "cuda"})


def test_a_directory_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotFound):
        TransformersEngine.load(tmp_path)


def test_chat_template_and_tokens_come_from_the_tokenizer(tiny):
    rendered = tiny.render(PROMPT)
    assert rendered == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    ids = tiny.engine.tokenize(rendered)
    assert ids[0] == 257 and ids.count(258) == 1  # the specials are parsed, not spelled out


def test_ignore_eos_runs_to_max_tokens(tiny):
    assert tiny.engine.eos_token_ids == frozenset()
    result = tiny.generate(PROMPT, LONG)
    assert result.finish_reason is FinishReason.LENGTH and result.usage.completion_tokens == 24


def test_static_cache_gives_the_dynamic_answers(tiny_dir, tiny):
    static = LLM.load(
        tiny_dir, engine_options={**ON_CPU, "static_cache": True, "n_ctx": 256, "ignore_eos": True}
    )
    try:
        for prompt in (PROMPT, "A second, longer prompt reuses the same cache after a reset."):
            assert static.generate(prompt, LONG) == tiny.generate(prompt, LONG)
        assert static.engine.n_ctx == 256
    finally:
        static.close()


def test_context_window_ends_the_answer(tiny_dir):
    small = LLM.load(
        tiny_dir, engine_options={**ON_CPU, "static_cache": True, "n_ctx": 40, "ignore_eos": True}
    )
    try:
        result = small.generate(PROMPT, {"temperature": 0.0, "max_tokens": 100})
        assert result.finish_reason is FinishReason.LENGTH
        assert result.usage.prompt_tokens + result.usage.completion_tokens == 40
    finally:
        small.close()


def test_sampling_is_seeded_per_request(tiny):
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 16}
    first = tiny.generate(PROMPT, {**params, "seed": 7})
    assert tiny.generate(PROMPT, {**params, "seed": 7}) == first
    others = {tiny.generate(PROMPT, {**params, "seed": s}).text for s in range(8, 12)}
    assert len(others | {first.text}) > 1


def test_top_k_one_is_greedy_and_penalty_changes_the_answer(tiny):
    greedy = tiny.generate(PROMPT, LONG)
    assert tiny.generate(PROMPT, {**LONG, "temperature": 1.5, "top_k": 1, "seed": 3}) == greedy
    penalised = tiny.generate(PROMPT, {**LONG, "repetition_penalty": 5.0})
    assert penalised.text != greedy.text


def test_continuous_batching_serves_concurrent_streams(tiny_dir):
    llm = LLM.load(
        tiny_dir,
        engine_options={**ON_CPU, "continuous_batching": True, "max_concurrency": 4, "ignore_eos": True},
    )
    try:
        assert llm.engine.concurrent and llm.engine.max_concurrency == 4
        results: list = []

        def worker():
            results.append(collect(llm.stream(PROMPT, {"temperature": 0.0, "max_tokens": 12})))

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == 4
        assert all(
            r.finish_reason is FinishReason.LENGTH and r.usage.completion_tokens == 12 for r in results
        )
        assert len({r.text for r in results}) == 1  # greedy runs as top-k 1: the same answer

        cancel = CancelToken()
        stream = llm.stream(PROMPT, {"temperature": 0.8, "max_tokens": 200}, cancel=cancel)
        next(stream)
        cancel.cancel()
        final = list(stream)[-1]
        assert final.finish_reason is FinishReason.CANCELLED and final.usage.completion_tokens < 200

        stream = llm.stream(PROMPT, {"temperature": 0.0, "max_tokens": 200})
        next(stream)
        stream.close()  # cancels the request inside transformers; the next one runs
        assert llm.generate(PROMPT, {"temperature": 0.0, "max_tokens": 3}).usage.completion_tokens == 3
    finally:
        llm.close()


# -- detokenizers ------------------------------------------------------------------------------

TOKENIZER = byte_tokenizer()
BACKEND = TOKENIZER.backend_tokenizer


def _decode(ids):
    return BACKEND.decode(ids, skip_special_tokens=True)


def _run(detok, ids):
    out = [detok.step(i) for i in ids]
    out.append(detok.flush())
    return [t for t in out if t is not None]


texts = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), max_size=30) | (
    st.sampled_from(["大阪の観光名所をひとつ教えて。", "👩‍👩‍👧‍👦🇯🇵", "e\u0301"])
)


@settings(deadline=None, max_examples=60)
@given(texts)
def test_decode_stream_gives_whole_characters_that_join_to_the_text(text):
    ids = BACKEND.encode(text, add_special_tokens=False).ids
    for detok in (DecodeStreamDetokenizer(BACKEND, _decode), OffsetDetokenizer(_decode)):
        chunks = _run(detok, ids)
        assert "".join(chunks) == text
        assert all(chunks) and not any("\ufffd" in c for c in chunks)


def test_special_tokens_render_as_nothing():
    ids = BACKEND.encode("<|im_start|>hi<|im_end|>", add_special_tokens=False).ids
    assert "".join(_run(DecodeStreamDetokenizer(BACKEND, _decode), ids)) == "hi"


def test_an_incomplete_character_at_the_end_is_flushed_as_replacement():
    ids = BACKEND.encode("a大", add_special_tokens=False).ids[:-1]
    assert "".join(_run(DecodeStreamDetokenizer(BACKEND, _decode), ids)) == "a\ufffd"
    assert "".join(_run(OffsetDetokenizer(_decode), ids)) == "a\ufffd"


def test_logprobs_from_the_decode_loop(tiny):
    chunks = list(tiny.stream(PROMPT, {"temperature": 0.0, "max_tokens": 6, "logprobs": 2}))
    entries = [entry for chunk in chunks for entry in chunk.logprobs]

    assert 1 <= len(entries) <= 6
    for entry in entries:
        assert entry.logprob <= 0.0 and len(entry.top) == 2
        assert entry.top[0].logprob >= entry.top[1].logprob
        assert abs(entry.logprob - entry.top[0].logprob) < 1e-5  # greedy: the most likely token


def test_logprobs_under_continuous_batching_are_the_decode_loops(tiny_dir, tiny):
    params = {"temperature": 0.0, "max_tokens": 6, "logprobs": 3}
    expected = [entry for chunk in tiny.stream(PROMPT, params) for entry in chunk.logprobs]
    llm = LLM.load(
        tiny_dir,
        engine_options={**ON_CPU, "continuous_batching": True, "max_concurrency": 2, "ignore_eos": True},
    )
    try:
        assert llm.engine.scores_tokens
        results: list = []

        def worker() -> None:  # two streams batched together, each scored on its own
            results.append([entry for chunk in llm.stream(PROMPT, params) for entry in chunk.logprobs])

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == 2
        for entries in results:
            # greedy under both: the same tokens, scored from the same raw distribution
            assert [e.token for e in entries] == [e.token for e in expected]
            for got, want in zip(entries, expected, strict=True):
                assert got.logprob == pytest.approx(want.logprob, abs=1e-4)
                assert [a.token for a in got.top] == [a.token for a in want.top] and len(got.top) == 3
                assert abs(got.logprob - got.top[0].logprob) < 1e-5  # greedy: the most likely

        # sampled: the logprob is the raw distribution's, not after temperature / top-k
        sampled = collect(llm.stream(PROMPT, {**params, "temperature": 0.7, "top_k": 5, "seed": 1}))
        assert 1 <= len(sampled.logprobs) <= 6 and all(e.logprob < 0.0 for e in sampled.logprobs)

        stream = llm.stream(PROMPT, {**params, "max_tokens": 200})
        next(stream)
        stream.close()  # closing a scored stream cancels the request inside transformers
        assert llm.generate(PROMPT, {"temperature": 0.0, "max_tokens": 3}).usage.completion_tokens == 3
    finally:
        llm.close()


def test_memory_estimate_is_the_parameters_and_the_kv_cache(tiny_dir, tiny):
    model = tiny.engine.model
    weights = sum(p.numel() * p.element_size() for p in [*model.parameters(), *model.buffers()])
    config = model.config
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4  # float32
    assert tiny.engine.memory_bytes() == weights + tiny.engine.n_ctx * per_token
    llm = LLM.load(
        tiny_dir, engine_options={**ON_CPU, "continuous_batching": True, "max_concurrency": 2, "n_ctx": 64}
    )
    try:  # every block of the paged cache: 2 sequences of 64 tokens, 32-token pages, one spare each
        assert llm.engine.memory_bytes() == weights + 2 * (2 + 1) * 32 * per_token
    finally:
        llm.close()
