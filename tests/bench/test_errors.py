"""Every way a server can fail a benchmark: a clear error per request, and everything measured
before it kept in the results. Real HTTP on 127.0.0.1 (scripted servers), no mocks."""

from __future__ import annotations

import json

import pytest

from llmflow.bench import BenchOptions, run_bench
from llmflow.errors import InvalidRequest
from tests.bench.servers import DONE, SSE, chunk, free_port, scripted_server


def options(url: str, **overrides) -> BenchOptions:
    base = {
        "url": url,
        "concurrency": (1,),
        "requests": 2,
        "max_tokens": 4,
        "prompt_tokens": 8,
        "warmup": False,
    }
    return BenchOptions(**{**base, **overrides})


def requests_of(document: dict) -> list[dict]:
    return [r for level in document["levels"] for r in level["requests"]]


def good_stream(n: int = 3) -> list[bytes | float]:
    return [chunk(f" t{i}") for i in range(n)] + [chunk(finish="length"), DONE]


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://127.0.0.1/v1", "http://", "not a url at all"])
def test_a_bad_url_fails_before_any_request(url):
    with pytest.raises(InvalidRequest, match="url"):
        run_bench(options(url))


def test_server_down():
    document = run_bench(options(f"http://127.0.0.1:{free_port()}/v1", warmup=True))
    assert "the warm-up request failed" in document["aborted"]
    error = document["warmup"]["error"]
    assert error["kind"] == "connect"
    assert "is the server running?" in error["message"] and "refused" in error["message"].lower()
    assert document["levels"] == []


def test_unknown_host():
    document = run_bench(options("http://no-such-host.invalid/v1"))
    (record,) = requests_of(document)[:1]
    assert record["error"]["kind"] == "connect"
    assert "every request at concurrency 1 failed" in document["aborted"]


def test_non_streaming_server_is_named_as_such():
    body = json.dumps({"id": "x", "object": "chat.completion", "choices": [{"message": {"content": "hi"}}]})
    with scripted_server(lambda n, req: (200, {"content-type": "application/json"}, [body.encode()])) as url:
        document = run_bench(options(url))
    records = requests_of(document)
    assert [r["error"]["kind"] for r in records] == ["not_streaming", "not_streaming"]
    assert "instead of an SSE stream" in records[0]["error"]["message"]


def test_a_request_the_server_drops_unanswered_is_sent_once_more():
    """A kept-alive connection the server had closed: HTTP clients send the request again."""
    with scripted_server(lambda n, body: None if n == 1 else (200, SSE, good_stream())) as url:
        document = run_bench(options(url, requests=3))
    records = requests_of(document)
    assert [(r["ok"], r["resent"]) for r in records] == [(True, False), (True, True), (True, False)]
    assert document["levels"][0]["summary"]["resent"] == 1 and records[1]["chunks"] == 3


def test_a_request_dropped_twice_fails_naming_the_broken_connection():
    with scripted_server(lambda n, body: None) as url:
        document = run_bench(options(url, requests=1))
    (record,) = requests_of(document)
    assert record["resent"] and record["error"]["kind"] == "incomplete"
    assert "Server disconnected without sending a response" in record["error"]["message"]


def test_malformed_sse_keeps_what_came_before_and_the_other_requests():
    def reply(number: int, body: dict):
        if number % 2 == 0:
            return 200, SSE, good_stream()
        return 200, SSE, [chunk(" a"), 0.02, chunk(" b"), 0.02, b"this is not sse\n\n"]

    with scripted_server(reply) as url:
        document = run_bench(options(url, requests=4))
    summary = document["levels"][0]["summary"]
    assert (summary["completed"], summary["failed"]) == (2, 2)
    assert summary["errors"] == {"malformed_sse": 2}
    bad = [r for r in requests_of(document) if not r["ok"]]
    for record in bad:
        assert "not an SSE field" in record["error"]["message"]
        assert record["chunks"] == 2 and record["ttft_s"] is not None and len(record["itl_s"]) == 1
    assert document["aborted"] is None


def test_data_that_is_not_json():
    with scripted_server(lambda n, req: (200, SSE, [chunk(" a"), b"data: {oops\n\n"])) as url:
        record = requests_of(run_bench(options(url)))[0]
    assert record["error"]["kind"] == "malformed_sse" and "not JSON" in record["error"]["message"]
    assert record["chunks"] == 1


def test_error_event_mid_stream():
    error = b'data: {"error": {"message": "the engine crashed", "type": "server_error"}}\n\n'
    with scripted_server(lambda n, req: (200, SSE, [chunk(" a"), error, DONE])) as url:
        record = requests_of(run_bench(options(url)))[0]
    assert record["error"] == {
        "kind": "stream_error",
        "message": "the server sent an error mid-stream: the engine crashed (server_error)",
    }


def test_stream_cut_before_the_end():
    with scripted_server(lambda n, req: (200, SSE, [chunk(" a"), chunk(" b")])) as url:
        record = requests_of(run_bench(options(url)))[0]
    assert record["error"]["kind"] == "incomplete" and record["chunks"] == 2


def test_a_finish_reason_without_done_is_a_complete_stream():
    with scripted_server(lambda n, req: (200, SSE, [chunk(" a"), chunk(finish="stop")])) as url:
        record = requests_of(run_bench(options(url)))[0]
    assert record["ok"] and record["finish_reason"] == "stop"


def test_http_error_status_carries_the_servers_message():
    body = b'{"error": {"message": "model \'x\' not found", "type": "invalid_request_error"}}'
    with scripted_server(lambda n, req: (404, {"content-type": "application/json"}, [body])) as url:
        record = requests_of(run_bench(options(url, request_usage=False)))[0]
    assert record["error"]["kind"] == "http_status"
    assert "HTTP 404" in record["error"]["message"] and "model 'x' not found" in record["error"]["message"]
    assert "is the URL right?" in record["error"]["message"]


def test_timeout():
    with scripted_server(lambda n, req: (200, SSE, [chunk(" a"), 1.5, DONE])) as url:
        record = requests_of(run_bench(options(url, timeout_s=0.3, requests=1)))[0]
    assert record["error"]["kind"] == "timeout" and record["chunks"] == 1


def test_a_server_that_refuses_stream_options_is_retried_without_them():
    seen = []

    def reply(number: int, body: dict):
        seen.append("stream_options" in body)
        if "stream_options" in body:
            return 400, {"content-type": "application/json"}, [b'{"error": {"message": "unknown field"}}']
        return 200, SSE, good_stream()

    with scripted_server(reply) as url:
        document = run_bench(options(url, requests=3))
    assert all(r["ok"] for r in requests_of(document))
    assert seen == [True, False, False, False]  # asked once, then never again
    assert any("refused stream_options" in note for note in document["notes"])


def test_a_400_that_is_not_about_stream_options_is_reported():
    def reply(number: int, body: dict):
        return 400, {"content-type": "application/json"}, [b'{"error": {"message": "max_tokens too big"}}']

    with scripted_server(reply) as url:
        record = requests_of(run_bench(options(url, requests=1)))[0]
    assert record["error"]["kind"] == "http_status" and "max_tokens too big" in record["error"]["message"]


def test_keep_alives_empty_chunks_and_usage():
    pieces = [
        b": ping\n\n",
        chunk(text=None),  # role-only first chunk
        chunk(" Hello"),
        b": keep-alive\n\n",
        chunk(""),  # an empty delta is not a token arrival
        chunk(" world"),
        b"event: ping\ndata: 2026-01-01\n\n",
        chunk("!"),
        chunk(finish="length"),
        chunk(usage={"prompt_tokens": 11, "completion_tokens": 4}),
        DONE,
    ]
    with scripted_server(lambda n, req: (200, SSE, pieces)) as url:
        record = requests_of(run_bench(options(url, requests=1)))[0]
    assert record["ok"]
    assert record["chunks"] == 3 and len(record["itl_s"]) == 2
    assert (record["output_tokens"], record["output_tokens_source"]) == (4, "usage")
    assert record["prompt_tokens"] == 11
    assert record["ttft_s"] <= record["e2e_s"]
