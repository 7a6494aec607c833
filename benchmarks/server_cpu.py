"""CPU time per streamed event in each thread of `llmflow serve`, read from /proc (Linux).

Streams a few greedy chat answers from a server in a child process with a lean client, then
reports each server thread's CPU time over those events: the llama.cpp threads, the generation
worker and the event loop (whose share is what HTTP streaming itself costs).

    python -m benchmarks.server_cpu --streams 3 --max-tokens 256
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording
from serve_process import ServeProcess, config_of

PROMPT = "Write a long story about a lighthouse keeper and a storm."


def thread_ticks(pid: int) -> dict[str, int]:
    """Thread id -> user + system clock ticks."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/server_cpu.json"))
    args = parser.parse_args()
    recording = Recording.begin("server_cpu")

    server_args = ["--engine-option", f"n_threads={args.threads}", "--engine-option", "n_ctx=4096"]
    with ServeProcess(server_args) as server, httpx.Client(base_url=server.url, timeout=600) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        body = {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "stream": True,
        }
        client.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 8})  # warm-up
        before = thread_ticks(server.pid)
        events = 0
        for _ in range(args.streams):
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                events += sum(1 for line in response.iter_lines() if line.startswith("data: {"))
        after = thread_ticks(server.pid)

    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    spent = {tid: (ticks - before.get(tid, 0)) * tick_s for tid, ticks in after.items()}
    main = str(server.pid)
    others = sorted((t for t in spent if t != main and spent[t]), key=spent.__getitem__, reverse=True)
    threads = []
    for tid in [main, *others]:
        label = "main thread (uvicorn's event loop)" if tid == main else f"thread {len(threads)}"
        threads.append({"thread": label, "cpu_s": spent[tid], "us_per_event": spent[tid] / events * 1e6})
        print(f"  {label} ({tid}): {spent[tid] * 1000:.0f} ms, {spent[tid] / events * 1e6:.0f} µs/event")
    summary = {
        "events": events,
        "clock_tick_ms": tick_s * 1000,
        "us_per_event_by_thread": {t["thread"]: t["us_per_event"] for t in threads},
    }
    recording.write(args.out, config=config_of(args), samples=threads, summary=summary)


if __name__ == "__main__":
    main()
