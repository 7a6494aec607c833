"""One benchmark run from options to results document: pick the backend, build the workload,
run the sweep, keep whatever was measured even when the run ends early."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmflow.bench.http_backend import APIS, HttpBackend, HttpOptions, resolve_endpoint
from llmflow.bench.inprocess import InProcessBackend, load_llm
from llmflow.bench.records import OutputTokenSource, RequestSpec
from llmflow.bench.report import Settings, Target, build_document
from llmflow.bench.sweep import Backend, Level, Plan, ProgressSink, Sweep, run_sweep
from llmflow.bench.tokens import EMBEDDED, TokenCounter, guess_tokenizer
from llmflow.bench.workload import dataset_requests, synthetic_requests
from llmflow.errors import InvalidRequest

DEFAULT_CONCURRENCY = (1, 2, 4, 8)
ITL_NOTE = (
    "ITL is the gap between consecutive text chunks (as vLLM measures it); a chunk can carry more "
    "than one token, so a request has at most output_tokens - 1 gaps. TPOT = (E2E - TTFT) / "
    "(output_tokens - 1)."
)


@dataclass(frozen=True)
class BenchOptions:
    """What `llmflow bench` takes. `url` set: an OpenAI-compatible server; otherwise `model`
    (a GGUF file, a model directory or an MLflow model URI; None: the embedded model) runs
    in this process."""

    url: str | None = None
    model: str | None = None
    api: str = "chat"
    concurrency: tuple[int, ...] | None = None
    request_rates: tuple[float, ...] = ()
    requests: int | None = None
    prompt_tokens: int = 128
    max_tokens: int = 128
    dataset: Path | None = None
    temperature: float = 0.0
    seed: int = 0
    tokenizer: str | None = None
    request_usage: bool = True
    warmup: bool = True
    timeout_s: float = 300.0
    api_key: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    engine_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class _RunState:
    """What the results document needs, filled in as the run goes (and kept if it stops)."""

    target: Target
    sweep: Sweep = field(default_factory=Sweep)
    tokenizer: str | None = None
    notes: list[str] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)


def levels_of(options: BenchOptions) -> list[Level]:
    if options.request_rates:
        cap = max(options.concurrency) if options.concurrency else None
        return [Level(concurrency=cap, request_rate=rate) for rate in options.request_rates]
    return [Level(concurrency=c) for c in options.concurrency or DEFAULT_CONCURRENCY]


def requests_for(level: Level, requested: int | None) -> int:
    """Per level: as asked, else enough for every worker to run four requests (at least 8)."""
    if requested is not None:
        return requested
    if level.request_rate is not None:
        return 32
    return max(8, 4 * (level.concurrency or 1))


def validate(options: BenchOptions) -> None:
    """Bad options fail here, before anything is loaded or sent."""
    checks = [
        ("concurrency", all(c >= 1 for c in options.concurrency or ()), "every value must be >= 1"),
        ("request_rate", all(r > 0 for r in options.request_rates), "every value must be > 0 (or inf)"),
        ("requests", options.requests is None or options.requests >= 1, "must be >= 1"),
        ("prompt_tokens", options.prompt_tokens >= 1, "must be >= 1"),
        ("max_tokens", options.max_tokens >= 1, "must be >= 1"),
        ("timeout", options.timeout_s > 0, "must be > 0"),
    ]
    for name, ok, message in checks:
        if not ok:
            raise InvalidRequest.single(name, message)
    if options.url is not None:
        resolve_endpoint(options.url, options.api)
    elif options.api not in APIS:
        raise InvalidRequest.single("api", f"must be one of {', '.join(APIS)}, not {options.api!r}")
    if options.dataset is not None:
        dataset_requests(options.dataset, 1, max_tokens=options.max_tokens)
    if options.tokenizer not in (None, EMBEDDED) and not Path(options.tokenizer).exists():
        raise InvalidRequest.single("tokenizer", f"no model file at {options.tokenizer!r}")


def run_bench(options: BenchOptions, progress: ProgressSink | None = None) -> dict[str, Any]:
    """Run the benchmark and return its results document; Ctrl-C ends it with the partial
    results. Raises `InvalidRequest` for bad options, before any request."""
    validate(options)
    started = dt.datetime.now(dt.timezone.utc)
    state = _RunState(target=_target(options))
    try:
        asyncio.run(_run(options, state, progress))
    except KeyboardInterrupt:
        state.sweep.aborted = "interrupted by the user"
    return build_document(state.sweep, state.target, _settings(options, state), state.notes, started)


def _target(options: BenchOptions) -> Target:
    if options.url is None:
        return Target("in_process", None, options.api, options.model)
    endpoint = resolve_endpoint(options.url, options.api)
    return Target("http", endpoint.url, endpoint.api, options.model)


def _settings(options: BenchOptions, state: _RunState) -> Settings:
    return Settings(
        requests=state.requests,
        prompt_tokens=None if options.dataset else options.prompt_tokens,
        max_tokens=options.max_tokens,
        dataset=options.dataset.name if options.dataset else None,
        temperature=options.temperature,
        seed=options.seed,
        tokenizer=state.tokenizer,
        request_usage=options.request_usage,
        warmup=options.warmup,
        timeout_s=options.timeout_s if options.url else None,
    )


async def _run(options: BenchOptions, state: _RunState, progress: ProgressSink | None) -> None:
    backend, counter = await _open_backend(options, state)
    try:
        plan = _plan(options, state, counter)
        await run_sweep(backend, plan, state.sweep, progress, counter)
    finally:
        await backend.aclose()
        state.notes.extend(_notes(options, state, backend, counter))


async def _open_backend(options: BenchOptions, state: _RunState) -> tuple[Backend, TokenCounter | None]:
    if options.url is None:
        return _open_in_process(options, state)
    return await _open_http(options.url, options, state)


def _open_in_process(options: BenchOptions, state: _RunState) -> tuple[Backend, TokenCounter]:
    workers = max(options.concurrency or DEFAULT_CONCURRENCY)
    llm = load_llm(options.model, options.engine_options or None, concurrent=workers > 1)
    state.target = replace(state.target, model=options.model or llm.model_name)
    state.tokenizer = llm.model_name
    backend = InProcessBackend(
        llm, api=options.api, temperature=options.temperature, max_workers=workers, owns_llm=True
    )
    return backend, TokenCounter.from_llm(llm)


async def _open_http(
    url: str, options: BenchOptions, state: _RunState
) -> tuple[Backend, TokenCounter | None]:
    """The server's model name comes from /models unless given; the tokenizer from the option,
    or from the model name when it says which."""
    http_options = HttpOptions(
        model=options.model,
        temperature=options.temperature,
        api_key=options.api_key,
        timeout_s=options.timeout_s,
        request_usage=options.request_usage,
        extra_body=dict(options.extra_body),
    )
    http = HttpBackend(resolve_endpoint(url, options.api), http_options)
    try:
        if options.model is None:
            model = await http.fetch_model_id()
            http.options = replace(http_options, model=model)
            state.target = replace(state.target, model=model)
        tokenizer = options.tokenizer or guess_tokenizer(http.options.model)
        if tokenizer is None:
            return http, None
        counter = TokenCounter.load(tokenizer)
    except BaseException:
        await http.aclose()
        raise
    state.tokenizer = tokenizer
    return http, counter


def _plan(options: BenchOptions, state: _RunState, counter: TokenCounter | None) -> Plan:
    levels = []
    for level in levels_of(options):
        count = requests_for(level, options.requests)
        state.requests.append(count)
        levels.append((level, _specs(options, count, level.key, counter)))
    warmup = None
    if options.warmup:
        first = _specs(options, 1, "warmup", counter)[0]
        warmup = replace(first, max_tokens=min(first.max_tokens, 16))
    return Plan(levels, warmup, options.seed)


def _specs(
    options: BenchOptions, count: int, key: str, counter: TokenCounter | None
) -> Sequence[RequestSpec]:
    if options.dataset is not None:
        return dataset_requests(options.dataset, count, max_tokens=options.max_tokens)
    return synthetic_requests(
        count,
        prompt_tokens=options.prompt_tokens,
        max_tokens=options.max_tokens,
        seed=options.seed,
        key=key,
        counter=counter,
    )


def _notes(
    options: BenchOptions, state: _RunState, backend: Backend, counter: TokenCounter | None
) -> list[str]:
    notes = [ITL_NOTE]
    if getattr(backend, "usage_rejected", False):
        notes.append("the server refused stream_options.include_usage; requests were sent without it")
    sources = {record.output_tokens[1] for level in state.sweep.levels for record in level.records}
    if OutputTokenSource.TOKENIZER in sources:
        notes.append(f"the server sent no usage: output tokens were counted with {state.tokenizer}")
    if OutputTokenSource.CHUNKS in sources:
        notes.append(
            "the server sent no usage and no tokenizer was available: output tokens are counted as "
            "text chunks (a lower bound); pass --tokenizer to count them"
        )
    if options.dataset is None and counter is None:
        notes.append("no tokenizer: synthetic prompts have about --prompt-tokens words, not tokens")
    return notes


def parse_list(text: str, kind: type, name: str) -> tuple[Any, ...]:
    """`"1,2,4"` -> (1, 2, 4); `inf` is allowed for floats."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = kind(part)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise InvalidRequest.single(name, f"{part!r} is not {what}") from None
        if isinstance(value, float) and math.isnan(value):
            raise InvalidRequest.single(name, "nan is not a rate")
        values.append(value)
    return tuple(values)
