"""SIGTERM on a real `llmflow serve`: no new connections, running streams go on for the grace
period and then end with a finish chunk and [DONE]; the process exits cleanly."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from serve_process import ServeProcess


def test_sigterm_ends_running_streams_cleanly():
    server = ServeProcess(["--shutdown-grace", "1"])
    with server:
        model = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
        body = {"model": model, "prompt": "Count: 1, 2, 3,", "max_tokens": 100_000, "stream": True}
        lines: list[str] = []
        first_token = threading.Event()

        def read() -> None:
            with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as response:
                for line in response.iter_lines():
                    lines.append(line)
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                        first_token.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert first_token.wait(120)
        server.terminate()
        terminated = time.monotonic()
        with pytest.raises(httpx.TransportError):  # soon no longer accepting
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                httpx.get(f"{server.url}/health", timeout=5)
                time.sleep(0.1)
        reader.join(60)
        assert not reader.is_alive()
        streamed_on_s = time.monotonic() - terminated
        assert server.wait(60) in (0, -15)  # uvicorn re-raises the SIGTERM it handled
    events = [line[6:] for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    finish = json.loads(events[-2])
    assert finish["choices"][0]["finish_reason"] in ("stop", "length", "cancelled")
    if finish["choices"][0]["finish_reason"] == "cancelled":  # ended by the server: after the grace
        assert streamed_on_s >= 0.9
    for event in events[:-1]:
        json.loads(event)  # every event is whole
