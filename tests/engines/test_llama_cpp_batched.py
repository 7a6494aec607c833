"""The batched llama.cpp engine with the embedded model, through `LLM` (so the streaming core
handles stop strings and max_tokens): concurrent streams give each the text it gets alone."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmflow import LLM, CancelToken, FinishReason
from llmflow.engines import guess_engine
from llmflow.engines.llama_cpp_batched import default_parallel
from llmflow.errors import InvalidParams
from llmflow.llm import collect
from llmflow.model_files import default_model_path
from tests.text_spans import token_span

PARALLEL = 8
PROMPTS = [
    "Name three colors.",
    "Write a haiku about the sea.",
    "What is the capital of France? Explain in detail.",
    "Tell me a story about a dragon and a knight who become friends after a long battle.",
    "List five fruits.",
    "Explain photosynthesis to a child.",
    "大阪の観光名所をひとつ教えて。",
    "Give me a recipe for pancakes.",
]
#: a raw prompt the model continues for a long time without an end-of-generation token
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"


@pytest.fixture(scope="module")
def llm():
    loaded = LLM.load(engine="llama_cpp_batched", engine_options={"n_ctx": 512, "parallel": PARALLEL})
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def one_at_a_time():
    """The one-at-a-time engine as it starts, whatever ran before in this process: reusing a
    prefix after a conversation of 64 tokens or more takes another path through llama.cpp's CPU
    attention than the same prefix computed anew (the kept tokens' content does not matter, the
    cache's history does), which can flip a near-tie; the shared `embedded_llm` has served every
    test before this module."""
    loaded = LLM.load(engine="llama_cpp", engine_options={"prompt_cache": False})
    yield loaded
    loaded.close()


def concurrently(fn, n, stagger_s=0.0):
    """fn(i) for i in range(n), each in its own thread, started `stagger_s` apart."""

    def run(i):
        time.sleep(i * stagger_s)
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def settle(engine, timeout=30.0):
    """Wait until every sequence is free: a closed stream is released at the next step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.free_sequences == stats.parallel and stats.waiting == 0:
            return stats
        time.sleep(0.01)
    raise AssertionError(f"sequences still held: {engine.stats()}")


def test_engine_says_how_many_streams_it_batches(llm):
    assert llm.engine.concurrent is True
    assert llm.engine.max_concurrency == PARALLEL
    assert llm.engine.n_ctx == 512
    assert llm.engine.stats().free_sequences == PARALLEL


def test_memory_estimate_is_the_weights_and_every_sequences_kv_cache(llm, embedded_llm):
    """What `--max-memory` counts: the weights once, the KV cache for every sequence (SmolLM2-135M:
    30 layers, 3 KV heads of 64, f16: 23040 bytes a token)."""
    weights = default_model_path().stat().st_size
    batched, single = llm.engine.memory_bytes(), embedded_llm.engine.memory_bytes()
    assert batched - 512 * PARALLEL * 23040 == single - embedded_llm.engine.n_ctx * 23040
    assert 0.9 * weights < batched - 512 * PARALLEL * 23040 < weights


def test_greedy_text_is_the_same_alone_and_in_a_batch_of_8(llm):
    greedy = {"temperature": 0.0, "max_tokens": 32}
    alone = [llm.generate(p, greedy) for p in PROMPTS]
    together = concurrently(lambda i: llm.generate(PROMPTS[i], greedy), 8, stagger_s=0.05)
    assert [c.text for c in together] == [c.text for c in alone]
    assert together == alone


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.0, "max_tokens": 24},
        {"temperature": 0.9, "seed": 7, "max_tokens": 24},
        {"temperature": 0.0, "repetition_penalty": 1.3, "max_tokens": 24},
        {"temperature": 1.2, "top_k": 5, "top_p": 0.8, "min_p": 0.1, "seed": 3, "repetition_penalty": 1.1},
    ],
)
def test_same_text_as_the_one_at_a_time_engine(llm, one_at_a_time, params):
    params = {"max_tokens": 24, **params}
    for prompt in PROMPTS[:2]:
        assert llm.generate(prompt, params) == one_at_a_time.generate(prompt, params)


def test_eight_streams_with_their_own_params_and_stops_each_end_as_alone(llm):
    greedy_text = llm.generate(PROMPTS[2], {"temperature": 0.0, "max_tokens": 24}).text
    # two tokens from the middle of this machine's greedy answer: reached within max_tokens 24
    stop = token_span(llm.engine, greedy_text, start=len(llm.engine.tokenize(greedy_text)) // 2, count=2)
    cases = [
        {"temperature": 0.0, "max_tokens": 5},
        {"temperature": 0.0, "max_tokens": 24, "stop": [stop, "zzz-never"]},
        {"temperature": 0.9, "seed": 7, "max_tokens": 20},
        {"temperature": 1.2, "top_k": 5, "seed": 123, "max_tokens": 16},
        {"temperature": 0.7, "top_p": 0.5, "min_p": 0.1, "seed": 99, "max_tokens": 12},
        {"temperature": 0.0, "repetition_penalty": 1.3, "max_tokens": 20},
        {"temperature": 0.0, "max_tokens": 30, "stop": "\n"},
        {"temperature": 0.5, "seed": 5, "max_tokens": 1},
    ]
    prompts = [PROMPTS[2] if i == 1 else PROMPTS[i] for i in range(8)]
    alone = [llm.generate(prompts[i], cases[i]) for i in range(8)]
    assert alone[1].finish_reason is FinishReason.STOP and stop not in alone[1].text
    assert alone[0].finish_reason is FinishReason.LENGTH and alone[0].usage.completion_tokens == 5
    chunks = concurrently(lambda i: list(llm.stream(prompts[i], cases[i])), 8, stagger_s=0.02)
    for i, stream in enumerate(chunks):
        assert collect(iter(stream)) == alone[i], cases[i]
        assert all(c.text for c in stream[:-1]) and stream[-1].text == ""


def test_cancelling_one_stream_leaves_the_others_untouched(llm):
    greedy = {"temperature": 0.0, "max_tokens": 24}
    expected = [llm.generate(p, greedy) for p in PROMPTS[:4]]
    cancel = CancelToken()

    def run(i):
        if i != 0:
            return collect(llm.stream(PROMPTS[i], greedy))
        chunks = []
        for chunk in llm.stream(PROMPTS[0], {"temperature": 0.0, "max_tokens": 200}, cancel=cancel):
            chunks.append(chunk)
            if len(chunks) == 3:
                threading.Thread(target=cancel.cancel).start()
        return chunks

    results = concurrently(run, 4)
    final = results[0][-1]
    assert final.finish_reason is FinishReason.CANCELLED
    assert final.usage.completion_tokens < 10
    assert results[1:] == expected[1:]
    settle(llm.engine)


def test_a_request_arriving_while_others_decode_starts_at_once(llm):
    params = {"temperature": 0.0, "max_tokens": 120}
    long_streams = [llm.stream(COUNTING, params, raw=True) for _ in range(3)]
    for stream in long_streams:
        next(stream)
    short = llm.generate(PROMPTS[0], {"temperature": 0.0, "max_tokens": 4})
    assert short.usage.completion_tokens == 4
    # the long streams are still decoding: the short one did not wait for them
    assert llm.engine.stats().running == 3
    long_results = [collect(s) for s in long_streams]
    assert all(r.usage.completion_tokens == 120 for r in long_results)


def test_requests_beyond_parallel_wait_for_a_sequence(llm):
    params = {"temperature": 0.0, "max_tokens": 24}
    expected = llm.generate(COUNTING, params, raw=True)
    seen_waiting = []

    def watch(stop: threading.Event):
        while not stop.is_set():
            seen_waiting.append(llm.engine.stats().waiting)
            time.sleep(0.005)

    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,))
    watcher.start()
    try:
        results = concurrently(lambda i: llm.generate(COUNTING, params, raw=True), PARALLEL + 2)
    finally:
        stop.set()
        watcher.join()
    assert results == [expected] * (PARALLEL + 2)
    assert max(seen_waiting) >= 1
    settle(llm.engine)


def test_no_sequence_leaks_after_200_mixed_requests(llm):
    def one(i):
        cancel = CancelToken()
        params = {"temperature": 0.0 if i % 2 else 0.8, "seed": i, "max_tokens": 1 + i % 4}
        if i % 3 == 0:
            params["stop"] = [",", "\n"]
        stream = llm.stream(f"{i}, {i + 1}, {i + 2},", params, raw=True, cancel=cancel)
        for n, chunk in enumerate(stream):
            if i % 5 == 0 and n == 0:
                cancel.cancel()
            if i % 7 == 0 and n == 0 and not chunk.is_final:
                stream.close()
                break
        return True

    with ThreadPoolExecutor(PARALLEL + 4) as pool:
        assert all(pool.map(one, range(200)))
    stats = settle(llm.engine)
    assert stats.running == 0 and stats.free_sequences == PARALLEL


@pytest.mark.parametrize(
    "options",
    [{"kv_unified": True}, {"one_pass": True, "wake_at_pass": True}],
    ids=["one_kv_pool", "one_pass_with_a_stream_each"],
)
def test_one_pass_steps_serve_streams_that_end_at_different_times(options):
    """The GPU's way of stepping, on the CPU: prompt chunks and decoding tokens in one
    llama_decode, a step's tokens going out as the next pass starts. In one KV pool a finished
    request's cells stay behind: moving a running sequence into its place must replace them, or
    positions clash and llama_decode fails."""
    pooled = LLM.load(engine="llama_cpp_batched", engine_options={"n_ctx": 256, "parallel": 4, **options})
    try:
        lengths = [3 + 5 * (i % 4) for i in range(12)]  # more than `parallel`: sequences are reused

        def one(i):
            return collect(pooled.stream(COUNTING, {"temperature": 0.0, "max_tokens": lengths[i]}, raw=True))

        results = concurrently(one, 12, stagger_s=0.01)
        assert [r.usage.completion_tokens for r in results] == lengths
        assert all(r.finish_reason is FinishReason.LENGTH for r in results)
        settle(pooled.engine)
    finally:
        pooled.close()


def test_options_are_validated():
    with pytest.raises(InvalidParams) as info:
        LLM.load(engine="llama_cpp_batched", engine_options={"parallel": 0, "bogus": 1})
    assert {p.field for p in info.value.problems} == {"parallel", "bogus"}
    with pytest.raises(InvalidParams) as info:
        LLM.load(engine="llama_cpp_batched", engine_options={"n_batch": 16, "prefill_chunk": 32})
    assert info.value.problems[0].field == "prefill_chunk"


def test_servers_get_the_batched_engine_for_a_gguf_file(tmp_path):
    model = tmp_path / "model.gguf"
    assert guess_engine(model) == "llama_cpp"
    assert guess_engine(model, concurrent=True) == "llama_cpp_batched"


def test_default_parallel_follows_context_size_and_cores():
    per_token = 23_040  # the embedded model's f16 KV bytes per token
    assert default_parallel(4096, per_token, cores=2) == 8
    assert default_parallel(4096, per_token, cores=1) == 4
    assert default_parallel(32_768, per_token, cores=16) == 1
    assert default_parallel(8192, per_token, cores=16) == 5


def test_concurrent_callers_get_the_batching_engine():
    from llmflow import LLM

    llm = LLM.load(concurrent=True, engine_options={"n_ctx": 256, "n_threads": 1, "parallel": 2})
    try:
        assert llm.engine.name == "llama_cpp_batched" and llm.engine.max_concurrency == 2
    finally:
        llm.close()
    llm = LLM.load(engine_options={"n_ctx": 256, "n_threads": 1})
    try:
        assert llm.engine.name == "llama_cpp"
    finally:
        llm.close()
