"""Servers in child processes on free loopback ports: `llmflow serve` for the reliability scripts
(`ServeProcess`: the server's memory and signals are its own), any OpenAI-compatible server for the
comparisons (`started`); and what the benchmarks ask them (`stream_chat`, `metric`, `wait_idle`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks.record import Recording, config_of

#: shared: a client per request times its TLS setup; no keep-alive: servers come and go on reused ports
CLIENT = httpx.Client(timeout=600, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """What the reliability scripts serve."""
    parser.add_argument("--model", default=None, help="MODEL for llmflow serve (default: the embedded model)")
    parser.add_argument("--engine", default=None)


def measure_served(name: str, args: argparse.Namespace, max_queue: int, measure: Callable[..., Any]) -> Any:
    """`measure(server)` against `llmflow serve` in a child process (`add_server_arguments`, a queue
    of `max_queue`), `random` seeded with `--seed` first. The result's `document()` is printed as
    JSON, and written to `--out` where given (with the machine and commit)."""
    recording = Recording.begin(name)
    random.seed(args.seed)
    served = [*([args.model] if args.model else []), *(["--engine", args.engine] if args.engine else [])]
    with ServeProcess(["--max-queue", str(max_queue), *served]) as server:
        result = measure(server)
    document = result.document()
    print(json.dumps(document, indent=2))
    if args.out:
        samples = document.pop("samples", None)
        recording.write(args.out, config=config_of(args), samples=samples, summary=document)
    return result


def clients(count: int, client: Callable[[float], Awaitable[None]], duration_s: float) -> float:
    """Run `count` copies of `client(deadline)` on one event loop until all return; the seconds taken."""
    start = time.monotonic()

    async def main() -> None:
        await asyncio.gather(*(client(start + duration_s) for _ in range(count)))

    asyncio.run(main())
    return round(time.monotonic() - start, 1)


def llmflow_serve(port: int, *more: str, model: Path | None = None, **options: Any) -> list[str]:
    """The command of `llmflow serve [MODEL]` on 127.0.0.1:`port`, logging warnings only, each of
    `options` an `--engine-option KEY=VALUE`, then `more` arguments."""
    engine_options = [part for k, v in options.items() for part in ("--engine-option", f"{k}={v}")]
    return [sys.executable, "-m", "llmflow", "serve", *([str(model)] if model else []), "--port", str(port),
            "--log-level", "warning", *engine_options, *more]  # fmt: skip


def model_id(url: str) -> str:
    """The first model a server lists (`url`: its `/v1` base)."""
    return CLIENT.get(f"{url}/models", timeout=30).json()["data"][0]["id"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` in Prometheus text whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        found = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if not found or found.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
        if all(have.get(key) == value for key, value in labels.items()):
            total += float(found.group(3))
    return total


def stream_chat(url: str, model: str, chat: list[dict] | str, max_tokens: int, **more: Any) -> dict[str, Any]:
    """One streamed, greedy chat request (`chat`: the messages, or one user message's text; `more`:
    more body fields): TTFT and the time of the last content (both from the start), end-to-end time,
    the answer and its chunk count, and the usage and llama-server's `timings` where sent."""
    messages = [{"role": "user", "content": chat}] if isinstance(chat, str) else chat
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True}, **more}  # fmt: skip
    start = time.perf_counter()
    ttft, last, parts, usage, timings = None, None, [], None, None
    with CLIENT.stream("POST", f"{url}/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            timings = event.get("timings") or timings
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    last = time.perf_counter() - start
                    ttft = ttft if ttft is not None else last
                    parts.append(text)
    return {"ttft_s": ttft, "last_s": last, "e2e_s": time.perf_counter() - start, "text": "".join(parts),
            "chunks": len(parts), "usage": usage, "timings": timings}  # fmt: skip


def wait_idle(url: str, timeout_s: float = 60) -> str:
    """/metrics once no request runs or waits and every engine sequence is free again (or once
    `timeout_s` is up: the caller checks what it got)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"{url}/metrics", timeout=30).text
        running = metric(text, "llmflow_num_requests_running") + metric(text, "llmflow_num_requests_waiting")
        if running + busy_sequences(text) == 0 or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def busy_sequences(text: str) -> float:
    """Engine sequences (KV-cache slots) still taken, from /metrics; 0 for an engine without them."""
    if "llmflow_engine_sequences" not in text:
        return 0.0
    return metric(text, "llmflow_engine_sequences") - metric(text, "llmflow_engine_free_sequences")


class ServeProcess:
    """`with ServeProcess(["--max-queue", "8"]) as server: server.url, server.process.pid`; what
    the server printed is in `server.output` once it has stopped."""

    def __init__(
        self, args: Sequence[str] = (), *, env: dict[str, str] | None = None, start_timeout_s: float = 180
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = llmflow_serve(self.port, *args)
        self.env = {**os.environ, **(env or {})}
        self.start_timeout_s = start_timeout_s
        self.output = ""

    def __enter__(self) -> ServeProcess:
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
        )
        if answers(self.process, f"{self.url}/health", self.start_timeout_s):
            return self
        self.__exit__()
        raise RuntimeError(f"the server on {self.url} did not start:\n{self.output}")

    def terminate(self) -> None:
        """SIGTERM: a graceful shutdown."""
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 60) -> int:
        out, _ = self.process.communicate(timeout=timeout_s)
        self.output += out or ""
        return self.process.returncode

    def __exit__(self, *exc: object) -> None:
        """Stop it where it still runs (SIGTERM, then SIGKILL after 30 s), keeping what it printed."""
        if self.process.stdout is None or self.process.stdout.closed:  # `wait` has read it all
            return
        if self.process.poll() is None:
            self.terminate()
        try:
            self.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.wait(10)


def answers(process: subprocess.Popen, url: str, timeout_s: float) -> bool:
    """Whether `url` answers with a success within `timeout_s` (False as soon as the process exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=2, trust_env=False).is_success:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


@contextmanager
def started(name: str, command: list[str], port: int, logs: Path, timeout_s: float = 300) -> Iterator[str]:
    """Run a server command (any OpenAI-compatible server) until the block ends; yield its base URL
    once `/v1/models` answers. Its output goes to `logs/<name>.log`."""
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        if not answers(process, f"http://127.0.0.1:{port}/v1/models", timeout_s):
            raise SystemExit(f"{name} did not start (exit {process.poll()}):\n{log.read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
