"""Hostile and broken clients, on raw sockets against real servers on 127.0.0.1: clients that
leave (mid-body, while queued, mid-stream) count as 499 and free every sequence, never a 5xx;
stalled clients get 408 and lose their connection; connections beyond the limit are refused
while a stream goes on; a real server error is a 500, logged with its traceback."""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Callable

import httpx
import pytest
import uvicorn
from serve_process import ServeProcess
from typer.testing import CliRunner

from llmflow import LLM
from llmflow.cli import app as cli
from llmflow.server import ServedModel, ServerSettings
from tests.observability.engines import EngineFailure, FailingEngine
from tests.server.conftest import TIMEOUT_S, metric, running, sse_events, wait_for_metric, wait_until_idle

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
#: a raw prompt the model keeps continuing, so a stream is still going when its client leaves
COUNTING = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "max_tokens": 2000, "stream": True}
PARALLEL = 2
MID_BODY, QUEUED, MID_STREAM_ROUNDS = 8, 8, 2


# -- a client on a raw socket ----------------------------------------------------------------------
def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)


def head(path: str, content_length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    ).encode()


def request(path: str, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    return head(path, len(payload)) + payload


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """What the server sent up to `marker` (or up to the end, when it closes first)."""
    data = b""
    while marker not in data:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    return data


def read_to_end(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (a reset counts as closed)."""
    data = b""
    try:
        while part := sock.recv(65536):
            data += part
    except ConnectionResetError:
        pass
    return data


def abort(sock: socket.socket, reset: bool) -> None:
    """Leave: an orderly close (FIN), or a reset (RST) as a crashed client or a proxy sends."""
    if reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


_SERVER_ERRORS = re.compile(r'^llmflow_requests_total\{.*status="5\d\d".*\} (\S+)$', re.M)


def server_errors(metrics_text: str) -> float:
    """All requests counted with a 5xx status, whatever the endpoint."""
    return sum(float(count) for count in _SERVER_ERRORS.findall(metrics_text))


# -- clients that leave ----------------------------------------------------------------------------
@pytest.mark.timeout(600)
def test_clients_that_leave_count_as_499_and_free_every_sequence():
    """`llmflow serve` as it ships (the batching engine): clients leave mid-body, while queued and
    mid-stream; /metrics shows 499s and no 5xx, no connection stays open, every sequence is free."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True}
    serve_args = ["--parallel", str(PARALLEL), "--max-queue", "16", "--model-name", "m"]
    with ServeProcess(serve_args) as server, httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        wait_for_metric(http, "llmflow_engine_free_sequences", PARALLEL)

        for _ in range(MID_BODY):  # headers and one byte of a 100 kB body, then gone
            sock = connect(server.port)
            sock.sendall(head(CHAT, 100_000) + b"{")
            sock.close()
        wait_until(lambda: counted(http, CHAT, "499") == MID_BODY)

        streams = open_streams(server.port, PARALLEL)  # every place taken: the next ones wait
        queued = [connect(server.port) for _ in range(QUEUED)]
        for sock in queued:
            sock.sendall(request(CHAT, chat))
        wait_for_metric(http, "llmflow_num_requests_waiting", QUEUED)
        for i, sock in enumerate(queued):
            abort(sock, reset=i % 2 == 1)
        wait_for_metric(http, "llmflow_num_requests_waiting", 0)
        wait_until(lambda: counted(http, CHAT, "499") == MID_BODY + QUEUED)

        for round_ in range(MID_STREAM_ROUNDS):
            streams = streams if round_ == 0 else open_streams(server.port, PARALLEL)
            for i, sock in enumerate(streams):
                abort(sock, reset=i % 2 == 1)
        opened = MID_STREAM_ROUNDS * PARALLEL  # a stream may have ended by itself just before (200)
        wait_until(lambda: counted(http, COMPLETIONS, "499") + counted(http, COMPLETIONS, "200") == opened)

        text = wait_until_idle(http)
        wait_for_metric(http, "llmflow_engine_free_sequences", PARALLEL)  # every sequence is free
        assert metric(text, "llmflow_engine_sequences") == PARALLEL
        wait_for_metric(http, "llmflow_open_connections", 1)  # this client's own
        left_mid_stream = metric(text, "llmflow_requests_total", endpoint=COMPLETIONS, status="499")
        assert left_mid_stream > 0
        assert metric(text, "llmflow_requests_finished_total", outcome="cancelled") == left_mid_stream
        assert server_errors(text) == 0, text

        answer = http.post(CHAT, json=chat)  # the server goes on serving
        assert answer.status_code == 200 and sse_events(answer.text)[-1] == "[DONE]"


def open_streams(port: int, count: int) -> list[socket.socket]:
    """`count` streams, each read up to its first text chunk (so they are decoding)."""
    streams = []
    for _ in range(count):
        sock = connect(port)
        sock.sendall(request(COMPLETIONS, {"model": "m", **COUNTING}))
        streams.append(sock)
    for sock in streams:
        read_until(sock, b'"text":"')
    return streams


def counted(http: httpx.Client, endpoint: str, status: str) -> float:
    return metric(http.get("/metrics").text, "llmflow_requests_total", endpoint=endpoint, status=status)


# -- stalled clients -------------------------------------------------------------------------------
READ_TIMEOUT_S = 1.0


def test_stalled_clients_get_408_and_lose_their_connection(served_llm):
    with running(served_llm, read_timeout_s=READ_TIMEOUT_S, keep_alive_timeout_s=READ_TIMEOUT_S) as server:
        silent = connect(server.port)  # connects and sends nothing
        slow_head = connect(server.port)  # sends part of its head, then nothing
        slow_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        no_body = connect(server.port)  # sends its head, then not the body it announced
        no_body.sendall(head(CHAT, 50))
        started = time.monotonic()
        for sock in (silent, slow_head, no_body):
            answer = read_to_end(sock)
            assert status_of(answer) == 408, answer
            assert b"connection: close" in answer.lower()
            error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
            assert error["code"] == "request_read_timeout" and error["type"] == "invalid_request_error"
            sock.close()
        assert time.monotonic() - started >= READ_TIMEOUT_S * 0.9

        idle = connect(server.port)  # one request, then idle on a kept-alive connection
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status_of(read_to_end(idle)) == 200  # answered, then closed after the keep-alive timeout
        idle.close()

        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            text = http.get("/metrics").text
    assert metric(text, "llmflow_connections_refused_total", reason="head_timeout") == 2
    assert metric(text, "llmflow_requests_total", endpoint=CHAT, status="408") == 1
    assert server_errors(text) == 0


# -- too many connections --------------------------------------------------------------------------
MAX_CONNECTIONS = 6


def test_connections_beyond_the_limit_are_refused_while_a_stream_goes_on(served_llm):
    """2x the limit of idle sockets while a stream runs: the extra ones get 503 at once, the
    others 408 after the read timeout; the stream goes on to its end meanwhile."""
    with running(served_llm, model_name="m", max_connections=MAX_CONNECTIONS, read_timeout_s=5) as server:
        stream = connect(server.port)
        stream.sendall(request(COMPLETIONS, {"model": "m", **COUNTING, "max_tokens": 32}))
        read_until(stream, b'"text":"')  # decoding

        idle = [connect(server.port) for _ in range(2 * MAX_CONNECTIONS)]
        rest = read_until(stream, b"data: [DONE]")
        assert b"data: [DONE]" in rest and b'"text":"' in rest  # streamed on during the flood
        stream.close()

        statuses = [status_of(read_to_end(sock)) for sock in idle]
        for sock in idle:
            sock.close()
        admitted = MAX_CONNECTIONS - 1  # the stream held one place
        assert sorted(statuses) == [408] * admitted + [503] * (2 * MAX_CONNECTIONS - admitted)

        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            answer = http.post(COMPLETIONS, json={"model": "m", "prompt": "Hi", "max_tokens": 2})
            assert answer.status_code == 200  # served again once the idle sockets are gone
            text = http.get("/metrics").text
    refused = "llmflow_connections_refused_total"
    assert metric(text, refused, reason="connection_limit") == 2 * MAX_CONNECTIONS - admitted
    assert metric(text, refused, reason="head_timeout") == admitted
    assert server_errors(text) == 0


# -- a real server error ---------------------------------------------------------------------------
def test_a_server_error_is_a_logged_500_and_an_error_event_in_a_started_stream(caplog):
    caplog.set_level(logging.ERROR)
    body = {"model": "failing", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100}
    with (
        running(ServedModel.from_llm(LLM(FailingEngine()), "failing")) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        answer = http.post(CHAT, json=body)
        assert answer.status_code == 500
        assert answer.json()["error"]["type"] == "server_error"
        streamed = http.post(CHAT, json={**body, "stream": True})
        assert streamed.status_code == 200  # the stream had begun
        events = sse_events(streamed.text)
        assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["type"] == "server_error"
        text = wait_until_idle(http)
    assert metric(text, "llmflow_requests_total", endpoint=CHAT, status="500") == 1
    assert metric(text, "llmflow_requests_total", endpoint=CHAT, status="499") == 0
    assert metric(text, "llmflow_requests_finished_total", outcome="error") == 2
    tracebacks = [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], EngineFailure)]
    assert len(tracebacks) >= 2  # both requests, with their tracebacks


# -- the options, and why uvicorn's own limit is not enough -----------------------------------------
def test_serve_options_have_safe_defaults_and_bad_values_are_named():
    defaults = ServerSettings()
    assert defaults.read_timeout_s == 30 and defaults.keep_alive_timeout_s == 5
    assert defaults.max_connections == 256
    runner = CliRunner()
    for option, value in (
        ("--read-timeout", "0"),
        ("--max-connections", "0"),
        ("--keep-alive-timeout", "-1"),
    ):
        result = runner.invoke(cli, ["serve", option, value])
        assert result.exit_code == 2 and f"invalid {option}" in result.output, result.output


def test_uvicorn_limit_concurrency_neither_refuses_idle_sockets_nor_spares_real_requests():
    """Why llmflow caps connections itself: with uvicorn's `limit_concurrency`, sockets that send
    nothing are all kept open, and they turn the next real request into a 503."""

    async def hello(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limit = 4
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(hello, limit_concurrency=limit, lifespan="off", log_level="critical")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started)
        idle = [connect(port) for _ in range(2 * limit)]
        wait_until(lambda: len(server.server_state.connections) == 2 * limit)
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=TIMEOUT_S).status_code == 503
        for sock in idle:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # still open, and nothing was sent to it
                sock.recv(1)
            sock.close()
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)
        listening.close()


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)
