"""The transformers engine on CUDA: the static-cache path (compiled, replayed as a CUDA graph, one
token queued ahead) and continuous batching. Skipped without a CUDA device."""

from __future__ import annotations

import threading

import pytest

from tests.extras import missing

torch = pytest.importorskip("torch", reason=missing("torch", "transformers"))
pytest.importorskip("transformers", reason=missing("transformers", "transformers"))

from llmflow import LLM, CancelToken, FinishReason  # noqa: E402
from llmflow.llm import collect  # noqa: E402
from tests.fakes.hf_models import write_tiny_model  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)"),
]

PROMPT = "Tell me about Osaka."
GREEDY = {"temperature": 0.0, "max_tokens": 32}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-hf-gpu") / "tiny")


@pytest.fixture(scope="module")
def fast(tiny_dir):
    """The CUDA default path (static cache, compiled, CUDA graph), in float32 rather than the
    default bfloat16 so that its answers can be compared exactly with the eager path's."""
    llm = LLM.load(tiny_dir, engine_options={"dtype": "float32", "ignore_eos": True, "n_ctx": 512})
    yield llm
    llm.close()


def test_cuda_defaults_are_static_compiled_and_graphed(tiny_dir, fast):
    placement = fast.engine.placement
    assert placement.on_cuda and placement.static_cache and placement.torch_compile and placement.cuda_graphs
    assert fast.engine._runner.uses_cuda_graph
    auto = LLM.load(tiny_dir, engine_options={"warmup": False, "static_cache": False})
    try:
        assert str(auto.engine.placement.dtype) == "torch.bfloat16"
    finally:
        auto.close()


def test_graph_path_gives_the_eager_answers(tiny_dir, fast):
    eager = LLM.load(tiny_dir, engine_options={"dtype": "float32", "ignore_eos": True, "static_cache": False})
    try:
        for prompt in (PROMPT, "Another prompt, after a cache reset."):
            assert fast.generate(prompt, GREEDY) == eager.generate(prompt, GREEDY)
        sampled = {"temperature": 0.9, "seed": 11, "max_tokens": 24}
        assert fast.generate(PROMPT, sampled) == fast.generate(PROMPT, sampled)
    finally:
        eager.close()


def test_cancel_and_close_stop_the_pipelined_loop(fast):
    cancel = CancelToken()
    stream = fast.stream(PROMPT, {"temperature": 0.0, "max_tokens": 400}, cancel=cancel)
    next(stream)
    threading.Thread(target=cancel.cancel).start()
    final = list(stream)[-1]
    assert final.finish_reason is FinishReason.CANCELLED and final.usage.completion_tokens < 50
    stream = fast.stream(PROMPT, {"temperature": 0.0, "max_tokens": 400})
    next(stream)
    stream.close()
    result = fast.generate(PROMPT, {"temperature": 0.0, "max_tokens": 5})
    assert result.usage.completion_tokens == 5


def test_max_tokens_and_context_window(fast):
    result = fast.generate(PROMPT, {"temperature": 0.0, "max_tokens": 7})
    assert result.finish_reason is FinishReason.LENGTH and result.usage.completion_tokens == 7
    result = fast.generate(PROMPT, {"temperature": 0.0, "max_tokens": 5000})
    assert result.usage.prompt_tokens + result.usage.completion_tokens == 512


def test_continuous_batching_on_cuda(tiny_dir):
    llm = LLM.load(
        tiny_dir, engine_options={"continuous_batching": True, "max_concurrency": 8, "ignore_eos": True}
    )
    try:
        assert llm.engine.concurrent and llm.engine.max_concurrency == 8
        results: list = []
        cancels = [CancelToken() for _ in range(8)]

        def worker(i):
            params = {"temperature": 0.0 if i % 2 else 0.7, "max_tokens": 40}
            results.append((i, collect(llm.stream(f"{PROMPT} #{i}", params, cancel=cancels[i]))))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        cancels[3].cancel()
        for t in threads:
            t.join(timeout=120)
        assert len(results) == 8
        for i, result in results:
            if i == 3:
                assert result.finish_reason in (FinishReason.CANCELLED, FinishReason.LENGTH)
            else:
                assert result.finish_reason is FinishReason.LENGTH and result.usage.completion_tokens == 40
    finally:
        llm.close()
