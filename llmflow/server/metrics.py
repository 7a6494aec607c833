"""Prometheus metrics of one app, in its own registry (several apps in one process never collide).

Names follow vLLM's where they mean the same thing, with an `llmflow_` prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmflow.engines.prompt_cache import CacheStats
from llmflow.engines.speculation import SpeculationCounts
from llmflow.media.prompt import ImageCacheStats
from llmflow.observability.timings import RequestTimings

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
)
_TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
_REQUEST_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: every series about a model's work carries its name
MODEL = "model"


@dataclass(frozen=True)
class ModelLoad:
    """What the gauges read of one served model at a scrape: its admission counts and, when it is
    loaded with an engine that reports its own state, that state (`Engine.stats()`)."""

    model: str
    loaded: bool
    running: int = 0
    waiting: int = 0
    engine_stats: Any = None
    #: what its engine's prompt cache holds (`Engine.cache_stats()`), when it has one
    cache_stats: CacheStats | None = None
    #: its estimate (weights and KV cache) while loaded; see `server/memory.py`
    memory_bytes: int = 0
    #: its engine's speculative draft tokens so far (`Engine.speculation_stats()`), when it speculates
    speculation: SpeculationCounts | None = None
    #: its engine's encoded images (`Engine.image_stats()`), when it reads images
    images: ImageCacheStats | None = None
    #: tokens its engine computed while idle for next turns (`Engine.next_turn_tokens_computed()`)
    next_turn_tokens: int | None = None


class ServerMetrics:
    """Histograms, counters and gauges of one server, labelled by `model`. Per-token data is
    observed once per request, at its end, so the token path only appends to a list."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def histogram(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, documentation, [MODEL], buckets=buckets, registry=r)

        def counter(name: str, documentation: str, labels: tuple[str, ...] = (MODEL,)) -> Counter:
            return Counter(name, documentation, labels, registry=r)

        self.ttft = histogram(
            "llmflow_time_to_first_token_seconds",
            "Time from arrival to the first text chunk",
            _LATENCY_BUCKETS,
        )
        self.inter_token = histogram(
            "llmflow_inter_token_latency_seconds",
            "Time between consecutive streamed text chunks",
            _TOKEN_GAP_BUCKETS,
        )
        self.queue_time = histogram(
            "llmflow_request_queue_time_seconds", "Time spent waiting for a place", _REQUEST_BUCKETS
        )
        self.e2e = histogram(
            "llmflow_e2e_request_latency_seconds",
            "Time from arrival to the end of generation",
            _REQUEST_BUCKETS,
        )
        self.prompt_tokens = counter("llmflow_prompt_tokens", "Prompt tokens processed")
        self.prompt_tokens_cached = counter(
            "llmflow_prompt_tokens_cached",
            "Prompt tokens whose KV state was reused (a kept conversation, the prompt cache), not computed",
        )
        self.prompt_tokens_computed = counter(
            "llmflow_prompt_tokens_computed", "Prompt tokens the engine computed (not reused)"
        )
        self.generation_tokens = counter("llmflow_generation_tokens", "Tokens generated")
        self.requests = counter(
            "llmflow_requests",
            "HTTP requests answered, by endpoint, status and the model they named (empty: none)",
            ("endpoint", "status", MODEL),
        )
        self.finished = counter(
            "llmflow_requests_finished", "Generations ended, by how they ended", (MODEL, "outcome")
        )
        self.loads = counter("llmflow_model_loads", "Models loaded (at start, or at a first request)")
        self.unloads = counter("llmflow_model_unloads", "Idle models unloaded")
        self.connections_refused = counter(
            "llmflow_connections_refused",
            "Connections closed before a request was read: over the connection limit, or no request "
            "head within the read timeout",
            ("reason",),
        )
        self._open_connections: Callable[[], int] = lambda: 0
        Gauge("llmflow_open_connections", "HTTP connections open now", registry=r).set_function(
            lambda: self._open_connections()
        )

    def watch_models(self, models: Callable[[], Iterable[ModelLoad]]) -> None:
        """Gauges per model, read at each scrape from `models()`; series at 0 for each name, so
        that a model shows before its first request."""
        for load in models():
            for counter in (
                self.prompt_tokens,
                self.prompt_tokens_cached,
                self.prompt_tokens_computed,
                self.generation_tokens,
            ):
                counter.labels(load.model)
        self.registry.register(_ModelGauges(models))

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        """Read the open-connection gauge from the server that runs the app."""
        self._open_connections = open_connections

    def observe(self, timings: RequestTimings, model: str) -> None:
        """Record one finished generation of `model`."""
        if timings.queue_s is not None:
            self.queue_time.labels(model).observe(timings.queue_s)
        if timings.ttft_s is not None:
            self.ttft.labels(model).observe(timings.ttft_s)
        inter_token = self.inter_token.labels(model)
        for gap in timings.inter_token:
            inter_token.observe(gap)
        if timings.e2e_s is not None:
            self.e2e.labels(model).observe(timings.e2e_s)
        if timings.prompt_tokens:
            self.prompt_tokens.labels(model).inc(timings.prompt_tokens)
            cached = timings.cached_tokens or 0
            self.prompt_tokens_cached.labels(model).inc(cached)
            self.prompt_tokens_computed.labels(model).inc(timings.prompt_tokens - cached)
        if timings.completion_tokens:
            self.generation_tokens.labels(model).inc(timings.completion_tokens)
        self.finished.labels(model, timings.outcome or "unknown").inc()

    def count_response(self, endpoint: str, status: int, model: str = "") -> None:
        self.requests.labels(endpoint, str(status), model).inc()

    def count_refused_connection(self, reason: str) -> None:
        self.connections_refused.labels(reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


#: the gauges of every served model, read at each scrape: key -> (name, documentation)
_GAUGES = {
    "loaded": ("llmflow_model_loaded", "1 while the model is loaded"),
    "running": ("llmflow_num_requests_running", "Requests admitted and not over yet"),
    "waiting": ("llmflow_num_requests_waiting", "Requests waiting for a place"),
    "memory": (
        "llmflow_model_memory_bytes",
        "Estimated memory the model holds (weights and KV cache); 0 while not loaded",
    ),
    "sequences": ("llmflow_engine_sequences", "Engine sequences (KV-cache slots) in all"),
    "free": ("llmflow_engine_free_sequences", "Engine sequences (KV-cache slots) free now"),
    "generated": ("llmflow_engine_generated_tokens", "Tokens the engine has generated since it loaded"),
    "opened": (
        "llmflow_engine_next_turn_tokens",
        "Tokens the engine computed while idle after answers, for their conversations' next turns",
    ),
}


class _ModelGauges(Collector):
    """Admission and engine gauges of every served model, loaded or not, read at each scrape."""

    def __init__(self, models: Callable[[], Iterable[ModelLoad]]):
        self._models = models

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families = {
            key: GaugeMetricFamily(name, documentation, labels=[MODEL])
            for key, (name, documentation) in _GAUGES.items()
        }
        cache_bytes = GaugeMetricFamily(
            "llmflow_prompt_cache_bytes",
            "Bytes of saved conversation states, by tier",
            labels=[MODEL, "tier"],
        )
        proposed = CounterMetricFamily(
            "llmflow_draft_tokens_proposed", "Speculative draft tokens verified", labels=[MODEL]
        )
        accepted = CounterMetricFamily(
            "llmflow_draft_tokens_accepted",
            "Speculative draft tokens the model's own samples confirmed (each a forward pass saved)",
            labels=[MODEL],
        )
        images = CounterMetricFamily(
            "llmflow_image_chunks",
            "Image chunks by how the engine got their encoding",
            labels=[MODEL, "outcome"],
        )
        image_bytes = GaugeMetricFamily(
            "llmflow_image_cache_bytes", "Bytes of encoded images the engine keeps", labels=[MODEL]
        )
        for load in self._models():
            name = [load.model]
            if load.images is not None:
                images.add_metric([load.model, "encoded"], load.images.encoded)
                images.add_metric([load.model, "reused"], load.images.reused)
                image_bytes.add_metric(name, load.images.bytes)
            if load.speculation is not None:
                proposed.add_metric(name, load.speculation.proposed)
                accepted.add_metric(name, load.speculation.accepted)
            if load.cache_stats is not None:
                cache_bytes.add_metric([load.model, "host"], load.cache_stats.host_bytes)
                cache_bytes.add_metric([load.model, "disk"], load.cache_stats.disk_bytes)
            families["loaded"].add_metric(name, 1.0 if load.loaded else 0.0)
            families["memory"].add_metric(name, load.memory_bytes)
            families["running"].add_metric(name, load.running)
            families["waiting"].add_metric(name, load.waiting)
            stats = load.engine_stats
            if stats is not None:  # an engine that reports its own state (the batching engine)
                families["sequences"].add_metric(name, stats.parallel)
                families["free"].add_metric(name, stats.free_sequences)
                families["generated"].add_metric(name, stats.tokens_generated_total)
            if load.next_turn_tokens is not None:
                families["opened"].add_metric(name, load.next_turn_tokens)
        families["cache_bytes"] = cache_bytes
        yield from (family for family in (proposed, accepted, images, image_bytes) if family.samples)
        yield from (family for family in families.values() if family.samples)  # absent, as before, when empty
