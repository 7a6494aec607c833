"""SIGTERM on a real `llmflow serve`: no new connections, running streams go on for the grace
period and then end with a finish chunk and [DONE]; the process exits cleanly."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from serve_process import ServeProcess

#: streams running when SIGTERM comes; a model may end one by itself within the grace period, but
#: not all four of them (sampled, each with its own seed), so the grace period is always checked
STREAMS = 4
GRACE_S = 1.0


def test_sigterm_ends_running_streams_cleanly():
    server = ServeProcess(["--shutdown-grace", str(GRACE_S)])
    with server:
        model = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
        streams = [_Stream(server.url, model, seed) for seed in range(STREAMS)]
        for stream in streams:
            assert stream.first_token.wait(120)
        server.terminate()
        terminated = time.monotonic()
        with pytest.raises(httpx.TransportError):  # soon no longer accepting
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                httpx.get(f"{server.url}/health", timeout=5)
                time.sleep(0.1)
        for stream in streams:
            stream.reader.join(60)
            assert not stream.reader.is_alive()
        assert server.wait(60) in (0, -15)  # uvicorn re-raises the SIGTERM it handled

    finishes = [stream.finish_reason() for stream in streams]
    assert set(finishes) <= {"stop", "length", "cancelled"}, finishes
    cut = [stream for stream in streams if stream.finish_reason() == "cancelled"]
    assert cut, "no stream was still running when the grace period ended"
    for stream in cut:  # ended by the server: not before the grace period was over
        assert stream.ended - terminated >= GRACE_S - 0.1


class _Stream:
    """A long sampled completion, read in a thread; `first_token` is set once text arrives."""

    def __init__(self, url: str, model: str, seed: int):
        self.lines: list[str] = []
        self.first_token = threading.Event()
        self.ended = 0.0
        body = {
            "model": model,
            "prompt": "Once upon a time",
            "max_tokens": 100_000,
            "temperature": 1.0,
            "seed": seed,
            "stream": True,
        }
        self.reader = threading.Thread(target=self._read, args=(f"{url}/v1/completions", body))
        self.reader.start()

    def _read(self, url: str, body: dict) -> None:
        with httpx.stream("POST", url, json=body, timeout=120) as response:
            for line in response.iter_lines():
                self.lines.append(line)
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                    self.first_token.set()
        self.ended = time.monotonic()

    def finish_reason(self) -> str:
        events = [line[6:] for line in self.lines if line.startswith("data: ")]
        assert events[-1] == "[DONE]", events[-3:]
        for event in events[:-1]:
            json.loads(event)  # every event is whole
        return json.loads(events[-2])["choices"][0]["finish_reason"]
