"""`llmflow bench` through its command line: files written, exit codes, clear errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llmflow.cli import app
from tests.bench.checks import check_document
from tests.bench.servers import DONE, SSE, chunk, free_port, scripted_server

FAST = ["--requests", "2", "--max-tokens", "4", "--prompt-tokens", "8", "--no-progress"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_in_process_run_writes_json_markdown_and_plot(runner, tmp_path):
    out = tmp_path / "results"
    result = runner.invoke(app, ["bench", "--concurrency", "1,2", "--threads", "1", "--out", str(out), *FAST])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "bench.json").read_text())
    check_document(document)
    table = (out / "bench.md").read_text()
    assert table.startswith("| load | ok | failed | req/s | output tok/s | TTFT median ms")
    assert "| c=1 | 2 | 0 |" in table and "| c=2 | 2 | 0 |" in table
    assert table in result.stdout
    assert (out / "bench.png").read_bytes().startswith(b"\x89PNG")


def test_progress_bar(runner, tmp_path):
    with scripted_server(
        lambda n, req: (200, SSE, [chunk(" a"), chunk(" b"), chunk(finish="stop"), DONE])
    ) as url:
        result = runner.invoke(
            app, ["bench", "--url", url, "--concurrency", "1", "--out", str(tmp_path), *FAST[:-1]]
        )
    assert result.exit_code == 0, result.output
    assert "concurrency 1" in result.stderr and "2/2" in result.stderr


def test_server_down_exits_1_and_keeps_the_results(runner, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = runner.invoke(app, ["bench", "--url", url, "--out", str(tmp_path), *FAST])
    assert result.exit_code == 1
    assert "is the server running?" in result.stderr
    document = json.loads((tmp_path / "bench.json").read_text())
    check_document(document)
    assert document["warmup"]["error"]["kind"] == "connect"


def test_failed_requests_exit_1(runner, tmp_path):
    def reply(number: int, body: dict):
        if number % 2:
            return 200, SSE, [chunk(" a"), b"garbage\n\n"]
        return 200, SSE, [chunk(" a"), chunk(finish="stop"), DONE]

    with scripted_server(reply) as url:
        args = ["bench", "--url", url, "--concurrency", "1", "--no-warmup", "--out", str(tmp_path), *FAST]
        result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "1 requests failed" in result.stderr
    summary = json.loads((tmp_path / "bench.json").read_text())["levels"][0]["summary"]
    assert (summary["completed"], summary["failed"]) == (1, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "localhost:8080"], "invalid url"),
        (["--url", "http://127.0.0.1:1/v1", "--concurrency", "1,x"], "'x' is not an integer"),
        (["--url", "http://127.0.0.1:1/v1", "--concurrency", "0"], "invalid concurrency"),
        (["--url", "http://127.0.0.1:1/v1", "--request-rate", "-1"], "invalid request_rate"),
        (["--url", "http://127.0.0.1:1/v1", "--extra-body", "{oops"], "invalid extra_body"),
        (["--url", "http://127.0.0.1:1/v1", "--api", "embeddings"], "invalid api"),
        (["--model", "no/such/model.gguf"], "no model file"),
        (["--url", "http://127.0.0.1:1/v1", "--dataset", "no-such.jsonl"], "invalid dataset"),
        (["--url", "http://127.0.0.1:1/v1", "--tokenizer", "no-such.gguf"], "invalid tokenizer"),
    ],
)
def test_bad_options_exit_2_before_any_request(runner, tmp_path, args, message):
    result = runner.invoke(app, ["bench", *args, "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not (tmp_path / "out").exists()
