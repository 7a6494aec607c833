"""Load: many streaming clients against one server with a bounded queue, on loopback.

Clients send streaming chat completions back to back; a refused request (429 or 503) must carry
`Retry-After`, which the client waits (capped). Checked: no 5xx but 503-with-Retry-After, no
broken stream (every 200 ends with a finish chunk, usage and `[DONE]`, no error event).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial

import httpx

from benchmarks.serve_process import (
    add_server_arguments,
    busy_sequences,
    clients,
    measure_served,
    model_id,
    wait_idle,
)
from benchmarks.suite import parser


@dataclass
class LoadResult:
    clients: int = 0
    seconds: float = 0.0
    ok_streams: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    refused_without_retry_after: int = 0
    server_errors: int = 0
    broken_streams: int = 0
    problems: list[str] = field(default_factory=list)
    #: engine sequences still taken once the load is over
    busy_sequences_after: float = -1
    completion_tokens: int = 0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    ttfts: list[float] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        clean = self.server_errors == self.broken_streams == self.refused_without_retry_after == 0
        return clean and self.ok_streams > 0 and self.busy_sequences_after == 0

    def document(self) -> dict:
        """The result without its TTFTs (they go to the samples) and with 20 problems at most."""
        document = {k: v for k, v in asdict(self).items() if k != "ttfts"}
        return {**document, "problems": self.problems[:20], "samples": {"ttft_s": self.ttfts}, "ok": self.ok}


PROMPTS = ("Say hello.", "Name three colours.", "What is 2 + 2?", "Write a haiku.", "Count to five.")


async def _request(client: httpx.AsyncClient, model: str, max_tokens: int, r: LoadResult) -> float:
    """One streamed chat completion; returns how long to wait before the next one."""
    messages = [{"role": "user", "content": random.choice(PROMPTS)}]
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    sent = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        status = response.status_code
        if status in (429, 503):
            r.refused[str(status)] = r.refused.get(str(status), 0) + 1
            retry_after = response.headers.get("retry-after")
            await response.aread()
            if retry_after is None:
                r.refused_without_retry_after += 1
                return 0.5
            return min(float(retry_after), 2.0) * random.uniform(0.5, 1.0)
        if status >= 500 or status != 200:
            r.server_errors += status >= 500
            r.problems.append(f"status {status}: {(await response.aread())[:200]!r}")
            return 0.0
        first: float | None = None
        finished = usage = done = False
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            event = json.loads(line[6:])
            if "error" in event:
                r.problems.append(f"error event: {event['error']}")
                break
            if event.get("usage"):
                usage = True
                r.completion_tokens += event["usage"]["completion_tokens"]
            for choice in event.get("choices", []):
                if choice["delta"].get("content") and first is None:
                    first = time.perf_counter()
                finished = finished or choice.get("finish_reason") is not None
        if not (finished and usage and done):
            r.broken_streams += 1
            r.problems.append(f"broken stream: finish={finished} usage={usage} done={done}")
            return 0.0
        r.ok_streams += 1
        if first is not None:
            r.ttfts.append(first - sent)
    return 0.0


async def _client(url: str, model: str, args: argparse.Namespace, r: LoadResult, deadline: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=args.request_timeout) as client:
        while time.monotonic() < deadline:
            try:
                pause = await _request(client, model, args.max_tokens, r)
            except httpx.HTTPError as exc:
                r.broken_streams += 1
                r.problems.append(f"{type(exc).__name__}: {exc}")
                pause = 0.0
            if pause:
                await asyncio.sleep(pause)


def load(url: str, args: argparse.Namespace) -> LoadResult:
    r, model = LoadResult(clients=args.clients), model_id(f"{url}/v1")
    r.seconds = clients(args.clients, partial(_client, url, model, args, r), args.duration)
    r.busy_sequences_after = busy_sequences(wait_idle(url))
    if r.ttfts:
        ordered = sorted(r.ttfts)
        r.ttft_p50_ms = round(statistics.median(ordered) * 1000, 1)
        r.ttft_p99_ms = round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1)
    r.tokens_per_s = round(r.completion_tokens / r.seconds, 1)
    r.requests_per_s = round(r.ok_streams / r.seconds, 2)
    return r


def main(argv: list[str] | None = None) -> LoadResult:
    p = parser(__doc__, "", clients=32, max_queue=8, max_tokens=32, seed=0)  # --max-queue: the server's bound
    p.add_argument("--duration", type=float, default=120, help="seconds during which clients send requests")
    p.add_argument("--request-timeout", type=float, default=120)
    add_server_arguments(p)
    args = p.parse_args(argv)
    return measure_served("load", args, args.max_queue, lambda server: load(server.url, args))


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
