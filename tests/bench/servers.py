"""Real HTTP servers on 127.0.0.1 for the benchmark tests: a streaming LLM server in a
subprocess, and tiny scripted servers that misbehave on purpose (standard library only)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(
    command: Sequence[str], port: int, log: Path, ready_path: str = "/v1/models"
) -> Iterator[str]:
    """Start a server, wait until it answers, yield its base URL, stop it at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_ready(process, f"http://127.0.0.1:{port}{ready_path}", log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _wait_ready(process: subprocess.Popen, url: str, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer within {timeout_s} s:\n{log.read_text()[-3000:]}")


#: (status, headers, body pieces) — pieces are sent one by one, a float is a pause in seconds;
#: None closes the connection without answering
Reply = tuple[int, dict[str, str], list[bytes | float]] | None


@contextmanager
def scripted_server(reply: Callable[[int, dict], Reply]) -> Iterator[str]:
    """A server whose POSTs are answered by `reply(request_number, json_body)`; GET /v1/models
    lists one model. Bodies go out unframed and the connection closes after each answer."""
    counter = iter(range(1_000_000))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._send(200, {"content-type": "application/json"}, [b'{"data": [{"id": "scripted"}]}'])

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with lock:
                number = next(counter)
            answer = reply(number, body)
            if answer is None:
                self.close_connection = True  # not a byte sent
                return
            self._send(*answer)

        def _send(self, status: int, headers: dict[str, str], pieces: list[bytes | float]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            for piece in pieces:
                if isinstance(piece, float):
                    time.sleep(piece)
                else:
                    self.wfile.write(piece)
                    self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


SSE = {"content-type": "text/event-stream"}


def chunk(text: str | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    """One OpenAI chat chunk as an SSE event."""
    choices = (
        []
        if usage is not None and text is None and finish is None
        else [{"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}]
    )
    body: dict = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
