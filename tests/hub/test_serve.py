"""`llmflow serve hf://...` as a real process on 127.0.0.1: the download comes first and is
announced before the port is bound, and `/v1/models` lists the reference."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.hub.conftest import GGUF_REPO
from tests.server.conftest import TIMEOUT_S, wait_healthy


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_downloads_before_binding_and_lists_the_reference(hub):
    reference = f"hf://{GGUF_REPO}:Q4_1"
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llmflow",
        "serve",
        reference,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in process.stderr:  # what it says up to "serving ..." (the port is bound after)
            lines.append(line)
            if line.startswith("serving"):
                break
        said = "".join(lines)
        assert said.index(f"fetching {reference}") < said.index("downloaded SmolLM2") < said.index("serving")
        assert f"serving '{reference}'" in said
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url)
        models = httpx.get(f"{url}/v1/models").json()
        assert [m["id"] for m in models["data"]] == [reference]
        body = {"model": reference, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S).json()
        assert answer["model"] == reference and answer["choices"][0]["message"]["content"]
    finally:
        process.terminate()
        process.wait(30)
