"""Prometheus metrics of one app, in its own registry (several apps in one process never collide).

Names follow vLLM's where they mean the same thing, with an `llmflow_` prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

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


class ServerMetrics:
    """Histograms, counters and gauges of one server. Per-token data is observed once per
    request, at its end, so the token path only appends to a list."""

    def __init__(self, running: Callable[[], int], waiting: Callable[[], int]):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ttft = Histogram(
            "llmflow_time_to_first_token_seconds",
            "Time from arrival to the first text chunk",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "llmflow_inter_token_latency_seconds",
            "Time between consecutive streamed text chunks",
            buckets=_TOKEN_GAP_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "llmflow_request_queue_time_seconds",
            "Time spent waiting for a place",
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "llmflow_e2e_request_latency_seconds",
            "Time from arrival to the end of generation",
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("llmflow_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("llmflow_generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter(
            "llmflow_requests",
            "HTTP requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.finished = Counter(
            "llmflow_requests_finished", "Generations ended, by how they ended", ["outcome"], registry=r
        )
        self.connections_refused = Counter(
            "llmflow_connections_refused",
            "Connections closed before a request was read: over the connection limit, or no request "
            "head within the read timeout",
            ["reason"],
            registry=r,
        )
        self._open_connections: Callable[[], int] = lambda: 0
        Gauge("llmflow_open_connections", "HTTP connections open now", registry=r).set_function(
            lambda: self._open_connections()
        )
        Gauge("llmflow_num_requests_running", "Requests admitted and not over yet", registry=r).set_function(
            running
        )
        Gauge("llmflow_num_requests_waiting", "Requests waiting for a place", registry=r).set_function(
            waiting
        )

    def watch_engine(self, stats: Callable[[], Any]) -> None:
        """Gauges read from an engine that reports its own state (the batching engine's `stats()`):
        free sequences, and the tokens it generated, counted as they are decoded."""
        r = self.registry
        Gauge(
            "llmflow_engine_sequences", "Engine sequences (KV-cache slots) in all", registry=r
        ).set_function(lambda: stats().parallel)
        Gauge(
            "llmflow_engine_free_sequences", "Engine sequences (KV-cache slots) free now", registry=r
        ).set_function(lambda: stats().free_sequences)
        Gauge(
            "llmflow_engine_generated_tokens", "Tokens the engine has generated since it loaded", registry=r
        ).set_function(lambda: stats().tokens_generated_total)

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        """Read the open-connection gauge from the server that runs the app."""
        self._open_connections = open_connections

    def observe(self, timings: RequestTimings) -> None:
        """Record one finished generation."""
        if timings.queue_s is not None:
            self.queue_time.observe(timings.queue_s)
        if timings.ttft_s is not None:
            self.ttft.observe(timings.ttft_s)
        for gap in timings.inter_token:
            self.inter_token.observe(gap)
        if timings.e2e_s is not None:
            self.e2e.observe(timings.e2e_s)
        if timings.prompt_tokens:
            self.prompt_tokens.inc(timings.prompt_tokens)
        if timings.completion_tokens:
            self.generation_tokens.inc(timings.completion_tokens)
        self.finished.labels(timings.outcome or "unknown").inc()

    def count_response(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def count_refused_connection(self, reason: str) -> None:
        self.connections_refused.labels(reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
