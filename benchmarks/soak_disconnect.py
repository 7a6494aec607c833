"""Disconnect soak: many streams cut at random points by several clients at once, then checks that
the server lost nothing.

Each stream is cut during prefill (a long prompt, cut after a random delay), right after the
response starts, or after a random number of text deltas. Afterwards every place and every engine
sequence is free; the engine decoded at most about a token per cut for dead requests (generated
less received: the token being decoded when the cut lands, plus what was on the socket); the
server's RSS grew by less than 5% over a warmed-up baseline; and it still answers a request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial

import httpx
import psutil

from benchmarks.serve_process import (
    ServeProcess,
    add_server_arguments,
    busy_sequences,
    clients,
    measure_served,
    metric,
    model_id,
    wait_idle,
)
from benchmarks.suite import parser

CUTS = ("prefill", "before_first_token", "mid_stream")
RSS_LIMIT = 0.05


@dataclass
class SoakResult:
    streams: int = 0
    cuts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CUTS, 0))
    completed: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    tokens_received: int = 0
    tokens_generated: float = 0.0
    tokens_after_cut_per_cut: float = 0.0
    running_after: float = -1
    waiting_after: float = -1
    #: engine sequences still taken once every stream is over: each cut must free its own
    busy_sequences_after: float = -1
    rss_before_mb: float = 0.0
    rss_after_mb: float = 0.0
    rss_growth: float = 0.0
    answers_after: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        idle = self.running_after == self.waiting_after == self.busy_sequences_after == 0
        quiet = self.rss_growth < RSS_LIMIT and self.tokens_after_cut_per_cut <= 2.0
        return not self.errors and idle and quiet and self.answers_after

    def document(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def long_prompt(words: int) -> str:
    """A prompt that takes a while to prefill; the random head defeats prefix caching."""
    head = f"Note {random.randrange(10**9)}. "
    return head + " ".join(f"item{i % 97} is listed here" for i in range(words // 4)) + "\nSummarise:"


async def _one_stream(
    client: httpx.AsyncClient, model: str, cut: str, args: argparse.Namespace, r: SoakResult
) -> None:
    story = f"Tell a story about the number {random.randrange(1000)}."
    prompt = long_prompt(args.prefill_words) if cut == "prefill" else story
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    cut_after = random.randint(1, args.max_tokens - 1)
    received = 0

    async def read() -> None:
        nonlocal received
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code in (429, 503):
                r.refused += 1
                return
            if response.status_code != 200:
                r.errors.append(f"status {response.status_code}: {(await response.aread())[:200]!r}")
                return
            if cut == "before_first_token":
                return  # leaving the block closes the connection before any text was read
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    r.errors.append(f"error event: {event['error']}")
                    return
                if event.get("usage"):
                    r.completed += 1
                    return
                if event["choices"] and event["choices"][0]["text"]:
                    received += 1
                    if cut == "mid_stream" and received >= cut_after:
                        return

    if cut == "prefill":
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read(), timeout=random.uniform(0.005, 0.15))
    else:
        await read()
    r.tokens_received += received


async def _client(
    url: str, model: str, queue: asyncio.Queue[str], args: argparse.Namespace, r: SoakResult, deadline: float
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while time.monotonic() < deadline and not queue.empty():  # no await before the get
            cut = queue.get_nowait()
            r.streams += 1
            r.cuts[cut] += 1
            try:
                await _one_stream(client, model, cut, args, r)
            except httpx.HTTPError as exc:
                r.errors.append(f"{type(exc).__name__}: {exc}")


def _generated(text: str) -> float:
    name = "llmflow_engine_generated_tokens"
    return metric(text, name if name in text else "llmflow_generation_tokens_total")


def _normal_answer(url: str, model: str, max_tokens: int = 8) -> bool:
    body = {"model": model, "prompt": "Hello", "max_tokens": max_tokens}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    return response.is_success and response.json()["choices"][0]["finish_reason"] in ("stop", "length")


def soak(served: ServeProcess, args: argparse.Namespace) -> SoakResult:
    url, server = served.url, psutil.Process(served.process.pid)
    r, model = SoakResult(), model_id(f"{url}/v1")
    for _ in range(args.warmup):  # warm the allocator and caches before the baseline
        _normal_answer(url, model, args.max_tokens)
        body = {"model": model, "prompt": long_prompt(args.prefill_words), "max_tokens": 4}
        httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    before = wait_idle(url)
    r.rss_before_mb = server.memory_info().rss / 2**20
    cuts: asyncio.Queue[str] = asyncio.Queue()
    rest = 1 - args.prefill_share
    for cut in random.choices(CUTS, weights=[args.prefill_share, rest / 3, 2 * rest / 3], k=args.streams):
        cuts.put_nowait(cut)
    r.seconds = clients(args.clients, partial(_client, url, model, cuts, args, r), args.time_limit)
    after = wait_idle(url)
    r.running_after = metric(after, "llmflow_num_requests_running")
    r.waiting_after = metric(after, "llmflow_num_requests_waiting")
    r.busy_sequences_after = busy_sequences(after)
    r.tokens_generated = _generated(after) - _generated(before)
    n_cut = max(1, r.streams - r.completed - r.refused)
    r.tokens_after_cut_per_cut = round(max(0.0, r.tokens_generated - r.tokens_received) / n_cut, 3)
    r.rss_after_mb = server.memory_info().rss / 2**20
    r.rss_growth = round(r.rss_after_mb / r.rss_before_mb - 1, 4)
    r.answers_after = _normal_answer(url, model)
    return r


def main(argv: list[str] | None = None) -> SoakResult:
    # --prefill-words: the long prompt of prefill cuts
    p = parser(__doc__, "", streams=1000, clients=8, max_tokens=48, prefill_words=600, warmup=5, seed=0)
    p.add_argument("--prefill-share", type=float, default=0.2, help="share of streams cut during prefill")
    p.add_argument("--time-limit", type=float, default=900, help="no new stream starts after this (s)")
    add_server_arguments(p)
    args = p.parse_args(argv)
    return measure_served("soak", args, args.clients * 2, lambda server: soak(server, args))


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
