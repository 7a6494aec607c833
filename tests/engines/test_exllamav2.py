"""The ExLlamaV2 engine. Options, registry and the lazy import run everywhere; loading and
generating need a CUDA GPU and exllamav2 (they skip with the reason otherwise). The shared
conformance suite runs on this engine too."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from llmflow import LLM, FinishReason, SamplingParams
from llmflow.constraints import Constraint
from llmflow.engines import engine_names, guess_engine
from llmflow.engines.exllamav2 import ExLlamaV2Engine, ExLlamaV2Options, sampler_settings, unavailable_reason
from llmflow.errors import EngineUnavailable, InvalidParams, ModelNotFound
from tests.constraints.schemas import PROMPT, SCHEMAS, assert_valid_answer

UNAVAILABLE = unavailable_reason()
needs_gpu = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


def test_importing_llmflow_never_imports_exllamav2_or_torch():
    code = (
        "import sys, llmflow, llmflow.engines, llmflow.engines.exllamav2, llmflow.llm;"
        "print(sorted(m for m in ('exllamav2', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_engine_is_registered_and_guessed_for_exl2_directories(tmp_path):
    assert "exllamav2" in engine_names()
    (tmp_path / "config.json").write_text(
        json.dumps({"quantization_config": {"quant_method": "exl2", "bits": 4.0}})
    )
    assert guess_engine(tmp_path) == "exllamav2"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert guess_engine(tmp_path) != "exllamav2"


def test_options_are_validated_naming_each_field():
    assert ExLlamaV2Options.parse({}).cache_type == "fp16"
    assert ExLlamaV2Options.parse({"cache_type": "q4", "max_seq_len": 8192}).cache_type == "q4"
    with pytest.raises(InvalidParams) as info:
        ExLlamaV2Options.parse({"cache_type": "q3", "max_seq_len": 0, "bogus": 1})
    assert {p.field for p in info.value.problems} == {"cache_type", "max_seq_len", "bogus"}
    with pytest.raises(InvalidParams, match="gpu_split needs autosplit=false"):
        ExLlamaV2Options.parse({"gpu_split": [20, 24]})
    assert ExLlamaV2Options.parse({"gpu_split": [20, 24], "autosplit": False}).gpu_split == (20, 24)
    assert ExLlamaV2Options.parse({"cudnn_attention": False}).cudnn_attention is False


def test_sampling_params_map_onto_exllamav2_settings():
    # the fields of ExLlamaV2Sampler.Settings that llmflow sets (the class needs the CUDA extension)
    settings_class = SimpleNamespace
    params = SamplingParams(temperature=0.7, top_k=50, top_p=0.8, min_p=0.05, repetition_penalty=1.05)
    s = sampler_settings(settings_class, params)
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.token_repetition_penalty) == (
        0.7,
        50,
        0.8,
        0.05,
        1.05,
    )
    g = sampler_settings(settings_class, SamplingParams(temperature=0.0, repetition_penalty=1.1))
    assert (g.top_k, g.token_repetition_penalty) == (1, 1.1)  # greedy keeps the penalty, like llama.cpp


def test_a_path_without_a_model_directory_is_rejected(tmp_path):
    with pytest.raises(ModelNotFound, match=r"config\.json"):
        ExLlamaV2Engine.load(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFound, match="safetensors"):
        ExLlamaV2Engine.load(tmp_path)


@pytest.mark.skipif(UNAVAILABLE is None, reason="exllamav2 and a GPU are present here")
def test_without_gpu_or_package_loading_says_what_is_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    tokenizer = {"model": {"type": "BPE", "vocab": {"a": 0}}, "decoder": {"type": "ByteLevel"}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(EngineUnavailable) as info:
        LLM.load(tmp_path, engine="exllamav2")
    assert str(info.value) == UNAVAILABLE


@pytest.fixture(scope="module")
def model_dir():
    from tests.models import Unavailable, tiny_llama_dir

    try:
        return tiny_llama_dir()
    except Unavailable as exc:
        pytest.skip(str(exc))


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cache_type", ["fp16", "q8", "q4"])
def test_each_cache_type_generates_deterministically(model_dir, cache_type):
    llm = LLM.load(
        model_dir, engine="exllamav2", engine_options={"cache_type": cache_type, "max_seq_len": 256}
    )
    try:
        params = {"temperature": 0.0, "max_tokens": 12}
        first = llm.generate("Tell me about Osaka.", params)
        assert first.usage.completion_tokens >= 1
        llm.engine.clear_cache()
        assert llm.generate("Tell me about Osaka.", params) == first
    finally:
        llm.close()


@needs_gpu
@pytest.mark.gpu
def test_a_full_context_ends_with_length(model_dir):
    llm = LLM.load(model_dir, engine="exllamav2", engine_options={"max_seq_len": 64})
    try:
        prompt = "one two three four five six seven eight nine ten"
        result = llm.generate(prompt, {"temperature": 0.0, "max_tokens": 500}, raw=True)
        assert result.finish_reason is FinishReason.LENGTH
        assert result.usage.prompt_tokens + result.usage.completion_tokens == 64
        # the engine is usable again afterwards
        assert (
            llm.generate(prompt, {"temperature": 0.0, "max_tokens": 3}, raw=True).usage.completion_tokens == 3
        )
    finally:
        llm.close()


@needs_gpu
@pytest.mark.gpu
def test_the_chat_template_and_eos_come_from_the_model_directory(model_dir):
    llm = LLM.load(model_dir, engine="exllamav2", engine_options={"max_seq_len": 256, "warmup": False})
    try:
        engine = llm.engine
        assert "<|im_start|>assistant\n" in llm.render("Hi")
        assert engine.tokenize("<|im_start|>user")[0] == 1  # special tokens are parsed
        assert 2 in engine.eos_token_ids  # <|im_end|>
        assert engine.n_ctx == 256
    finally:
        llm.close()


@needs_gpu
@pytest.mark.gpu
def test_logprobs_are_the_raw_distributions(model_dir):
    llm = LLM.load(model_dir, engine="exllamav2", engine_options={"max_seq_len": 256, "warmup": False})
    try:
        assert llm.engine.scores_tokens
        greedy = llm.generate("Tell me about Osaka.", {"temperature": 0.0, "max_tokens": 8, "logprobs": 3})
        assert 1 <= len(greedy.logprobs) <= 8
        for entry in greedy.logprobs:
            assert entry.logprob <= 0.0 and len(entry.top) == 3
            assert entry.top[0].logprob >= entry.top[1].logprob >= entry.top[2].logprob
            assert abs(entry.logprob - entry.top[0].logprob) < 1e-4  # greedy: the most likely token
        # the raw distribution: a penalty, a temperature and top-k change what is sampled, not
        # the logprobs of the first token
        llm.engine.clear_cache()
        params = {"temperature": 0.7, "top_k": 2, "repetition_penalty": 1.3, "seed": 1, "max_tokens": 1}
        sampled = llm.generate("Tell me about Osaka.", {**params, "logprobs": 3})
        first = greedy.logprobs[0]
        assert [a.logprob for a in sampled.logprobs[0].top] == pytest.approx(
            [a.logprob for a in first.top], abs=1e-3
        )
        # and without logprobs, plain ids: the text is the same
        llm.engine.clear_cache()
        plain = llm.generate("Tell me about Osaka.", {"temperature": 0.0, "max_tokens": 8})
        assert plain.text == greedy.text and plain.logprobs == ()
    finally:
        llm.close()


@pytest.fixture(scope="module")
def exl2(model_dir):
    if UNAVAILABLE is not None:
        pytest.skip(UNAVAILABLE)
    llm = LLM.load(model_dir, engine="exllamav2", engine_options={"max_seq_len": 512, "warmup": False})
    yield llm
    llm.close()


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize(("seed", "temperature"), [(0, 0.0), (7, 1.0), (1234, 1.0)])
def test_every_finished_constrained_answer_validates(exl2, name, seed, temperature):
    """The structured-output property test of the CPU engines, on ExLlamaV2 (masked on the GPU)."""
    schema = SCHEMAS[name]
    params = {"max_tokens": 64, "seed": seed, "temperature": temperature}
    done = exl2.generate(PROMPT, params, constraint=Constraint.json_schema(schema))
    assert_valid_answer(exl2, schema, done)
