"""One stream over HTTP against the same stream in process: what `llmflow serve` costs per token.

The same greedy answer from the same GGUF and threads, six ways: `in_process` (`LLM.stream` on
`llama_cpp_batched`, the server's engine), `in_process_llama_cpp` (`LLM.load`'s default engine),
`in_process_pyfunc` (the LLM as an MLflow pyfunc model), `llmflow_http` (`llmflow serve`, read with
the `openai` client), `llmflow_http_sse` (the same server read with `llmflow bench`'s lean SSE
parser: the server's cost apart from the client's) and `llama_cpp_server` (`python -m
llama_cpp.server`). Ways alternate, the first rotating, after a warm-up each; the prompt repeats,
so every server reuses its cached prefix as in a chat. Decode speed counts the text chunks after
the first (one a token here) over the time after the first. This process's CPU time per chunk is,
for the HTTP ways, what the client costs: on few cores it takes that time from the server.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
from mlflow.models import Model
from mlflow.pyfunc import PyFuncModel
from openai import OpenAI

from benchmarks.record import Recording, alternated, paired_ratios, spread
from benchmarks.serve_process import free_port, llmflow_serve, started
from benchmarks.suite import parser
from llmflow import LLM
from llmflow.bench.openai_chunks import parse_event
from llmflow.bench.sse import SSEParser
from llmflow.engines.llama_cpp import usable_cores
from llmflow.mlflow import LlmflowPyfuncModel
from llmflow.mlflow.signature import build_signature
from llmflow.model_files import resolve_model_path

PROMPT = "Write a long story about a lighthouse keeper and a storm."
N_CTX = 4096
MODEL_NAME = "bench"


@dataclass(frozen=True)
class Sample:
    ttft_ms: float
    decode_tok_s: float | None
    chunks: int
    e2e_ms: float
    #: CPU time of this whole process per chunk: the client's cost for the HTTP ways (the
    #: llama.cpp threads are in the server then); for in-process ways it includes the decoding
    cpu_us_per_chunk: float


def timed(texts: Iterable[str]) -> Sample:
    """Time a stream of text pieces (the clock starts when `texts` is created by the caller)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    first, last, chunks = None, None, 0
    for text in texts:
        if not text:
            continue
        last = time.perf_counter()
        first = first or last
        chunks += 1
    end = time.perf_counter()
    cpu_s = time.process_time() - cpu_start
    if first is None or last is None:
        raise RuntimeError("the stream produced no text")
    rate = (chunks - 1) / (last - first) if chunks > 1 and last > first else None
    return Sample((first - start) * 1000, rate, chunks, (end - start) * 1000, cpu_s / chunks * 1e6)


def in_process(llm: LLM, max_tokens: int) -> Callable[[], Sample]:
    params = {"temperature": 0.0, "max_tokens": max_tokens}
    return lambda: timed(chunk.text for chunk in llm.stream(PROMPT, params))


def in_process_pyfunc(llm: LLM, max_tokens: int) -> Callable[[], Sample]:
    pyfunc = pyfunc_model(llm)
    params = {"temperature": 0.0, "max_tokens": max_tokens}
    return lambda: timed(c["content"] for c in pyfunc.predict_stream({"prompt": PROMPT}, params=params))


def pyfunc_model(llm: LLM) -> PyFuncModel:
    """The LLM as an MLflow pyfunc model in memory, with the signature a logged llmflow model has
    (MLflow's schema checks included), without saving it."""
    python_model = LlmflowPyfuncModel.from_llm(llm)
    impl = SimpleNamespace(
        predict=lambda data, params=None: python_model.predict(None, data, params=params),
        predict_stream=lambda data, params=None: python_model.predict_stream(None, data, params=params),
    )
    meta = Model(signature=build_signature(llm.default_params, llm.system_prompt))
    return PyFuncModel(
        model_meta=meta, model_impl=impl, predict_fn="predict", predict_stream_fn="predict_stream"
    )


def over_http(base_url: str, max_tokens: int) -> Callable[[], Sample]:
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    messages = [{"role": "user", "content": PROMPT}]

    def run() -> Sample:
        stream = client.chat.completions.create(
            model=MODEL_NAME, messages=messages, max_tokens=max_tokens, temperature=0.0, stream=True
        )
        return timed(c.choices[0].delta.content or "" for c in stream if c.choices)

    return run


def over_http_sse(base_url: str, max_tokens: int) -> Callable[[], Sample]:
    client = httpx.Client(base_url=base_url, timeout=600)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0.0, "stream": True}  # fmt: skip

    def texts() -> Iterator[str]:
        parser = SSEParser()
        with client.stream("POST", "/chat/completions", json=body) as response:
            for line in response.iter_lines():
                event = parser.feed(line, 0.0)
                delta = parse_event(event) if event is not None else None
                if delta is not None:
                    yield delta.text

    return lambda: timed(texts())


def server_command(name: str, model: Path, threads: int, port: int) -> list[str]:
    if name == "llmflow_http":
        return llmflow_serve(port, "--model-name", MODEL_NAME, model=model, n_threads=threads, n_ctx=N_CTX)
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
        "--n_threads_batch", str(threads), "--n_ctx", str(N_CTX), "--verbose", "False",
    ]  # fmt: skip


def ratios(samples: dict[str, list[Sample]]) -> dict[str, dict | None]:
    """Each ratio round by round (both ways ran in the same round), as median and min-max."""

    def ratio(a: str, b: str) -> dict | None:
        return paired_ratios([s.decode_tok_s for s in samples[a]], [s.decode_tok_s for s in samples[b]])

    pairs = zip(samples["llmflow_http"], samples["in_process"], strict=True)
    return {
        "http_over_in_process_tok_s": ratio("llmflow_http", "in_process"),  # target >= 0.97
        "http_over_in_process_pyfunc_tok_s": ratio("llmflow_http", "in_process_pyfunc"),
        "lean_client_http_over_in_process_tok_s": ratio("llmflow_http_sse", "in_process"),
        "http_over_in_process_llama_cpp_tok_s": ratio("llmflow_http", "in_process_llama_cpp"),
        "ttft_overhead_ms": spread(http.ttft_ms - local.ttft_ms for http, local in pairs),  # target <= 10
        "llmflow_over_llama_cpp_server_tok_s": ratio("llmflow_http", "llama_cpp_server"),  # target >= 1.0
    }


def main() -> None:
    p = parser(__doc__, "benchmarks/results/http.json", runs=15, max_tokens=128)  # --runs: per way
    p.add_argument("--model", type=Path, default=None, help="GGUF file; default: the embedded model")
    p.add_argument("--threads", type=int, default=usable_cores())
    args = p.parse_args()
    recording = Recording.begin("http")
    model, max_tokens = resolve_model_path(args.model), args.max_tokens
    # the engine `llmflow serve` uses for a GGUF file (llama_cpp_batched), so both sides compute alike
    options = {"n_threads": args.threads, "n_ctx": N_CTX}
    llm = LLM.load(model, concurrent=True, engine_options=options)
    ways = {"in_process": in_process(llm, max_tokens),
            "in_process_llama_cpp": in_process(LLM.load(model, engine_options=options), max_tokens),
            "in_process_pyfunc": in_process_pyfunc(llm, max_tokens)}  # fmt: skip
    with ExitStack() as stack, tempfile.TemporaryDirectory() as logs:
        for name in ("llmflow_http", "llama_cpp_server"):
            port = free_port()
            command = server_command(name, model, args.threads, port)
            url = stack.enter_context(started(name, command, port, Path(logs)))
            ways[name] = over_http(url, max_tokens)
            if name == "llmflow_http":
                ways["llmflow_http_sse"] = over_http_sse(url, max_tokens)
        samples = alternated(ways, args.runs)  # the warm-up: pages loaded, the prompt in each cache

    config = {"model": model.name, "threads": args.threads, "runs": args.runs, "max_tokens": max_tokens,
              "n_ctx": N_CTX, "prompt": PROMPT, "ways": list(samples)}  # fmt: skip
    figures = ("decode_tok_s", "ttft_ms", "cpu_us_per_chunk")
    spreads = {name: {key: spread(getattr(s, key) for s in values) for key in figures}
               for name, values in samples.items()}  # fmt: skip
    samples_ = {name: [asdict(s) for s in values] for name, values in samples.items()}
    summary = {"spread": spreads, "ratios": ratios(samples)}
    recording.write(args.out, config=config, samples=samples_, summary=summary, hide=[model])


if __name__ == "__main__":
    main()
