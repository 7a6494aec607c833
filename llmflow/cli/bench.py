"""`llmflow bench`: TTFT, ITL, TPOT, E2E and throughput of an OpenAI-compatible streaming
endpoint (`--url`), or of a model in this process, at several load levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from llmflow.cli.common import exit_on_llmflow_error

EXIT_FAILED_REQUESTS = 1

_URL_HELP = "OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1; without it the model runs in-process"
_MODEL_HELP = (
    "with --url: the model name to request (default: the first one the server lists); "
    "without --url: a GGUF file, model directory or MLflow model URI (default: the embedded model)"
)


def bench(
    url: Annotated[str | None, typer.Option(help=_URL_HELP)] = None,
    model: Annotated[str | None, typer.Option(help=_MODEL_HELP)] = None,
    api: Annotated[str, typer.Option(help="chat (/chat/completions) or completions (/completions)")] = "chat",
    concurrency: Annotated[
        str | None, typer.Option(help="requests in flight per level, comma-separated (default 1,2,4,8)")
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Poisson arrivals per second per level, comma-separated (inf: all at once)"),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(help="requests per level (default: 4 per concurrent slot, at least 8; 32 per rate)"),
    ] = None,
    prompt_tokens: Annotated[int, typer.Option(help="tokens per synthetic prompt")] = 128,
    max_tokens: Annotated[int, typer.Option(help="tokens to generate per request at most")] = 128,
    dataset: Annotated[
        Path | None, typer.Option(help='JSONL: one {"prompt": ...} or {"messages": [...]} per line')
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="GGUF file (or 'embedded') to count tokens with when the server sends no usage"),
    ] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature (0 = greedy)")] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of the synthetic prompts and arrival times")] = 0,
    timeout: Annotated[float, typer.Option(help="seconds without data before a request fails")] = 300.0,
    api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY", show_envvar=False)] = None,
    extra_body: Annotated[
        str | None, typer.Option(help="JSON merged into every request, e.g. '{\"ignore_eos\": true}'")
    ] = None,
    usage: Annotated[bool, typer.Option(help="ask for stream_options.include_usage")] = True,
    warmup: Annotated[bool, typer.Option(help="send one unmeasured request first")] = True,
    threads: Annotated[int | None, typer.Option(help="in-process: llama.cpp threads")] = None,
    out: Annotated[Path, typer.Option(help="directory for bench.json, bench.md and bench.png")] = Path(
        "bench-results"
    ),
    progress: Annotated[bool, typer.Option(help="show a live progress bar")] = True,
) -> None:
    """Benchmark streaming: per-request TTFT, inter-token latency, TPOT and end-to-end latency,
    throughput per load level; writes JSON, a Markdown table and a plot."""
    from llmflow.bench.driver import BenchOptions, parse_list

    with exit_on_llmflow_error():
        options = BenchOptions(
            url=url,
            model=model,
            api=api,
            concurrency=parse_list(concurrency, int, "concurrency") if concurrency else None,
            request_rates=parse_list(request_rate, float, "request_rate") if request_rate else (),
            requests=requests,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            dataset=dataset,
            temperature=temperature,
            seed=seed,
            tokenizer=tokenizer,
            request_usage=usage,
            warmup=warmup,
            timeout_s=timeout,
            api_key=api_key,
            extra_body=_json_object(extra_body),
            engine_options={"n_threads": threads} if threads else {},
        )
        document = _run(options, progress)
    _report(document, out)


def _run(options: Any, show_progress: bool) -> dict[str, Any]:
    from llmflow.bench.driver import run_bench

    if not show_progress:
        return run_bench(options)
    from llmflow.bench.progress import RichProgress

    with RichProgress() as sink:
        return run_bench(options, sink)


def _report(document: dict[str, Any], out: Path) -> None:
    """Write the three files, print the table, and exit 1 if anything failed."""
    from llmflow.bench.report import markdown_table, plot, write_json

    out.mkdir(parents=True, exist_ok=True)
    write_json(document, out / "bench.json")
    table = markdown_table([(None, document)])
    (out / "bench.md").write_text(table, encoding="utf-8")
    if document["levels"]:
        plot([(None, document)], out / "bench.png", title=_title(document))
    typer.echo(table)
    for note in document["notes"]:
        typer.secho(f"note: {note}", err=True, dim=True)
    typer.secho(f"results in {out}/ (bench.json, bench.md, bench.png)", err=True, dim=True)
    failed = sum(level["summary"]["failed"] for level in document["levels"])
    if document["aborted"]:
        typer.secho(f"error: {document['aborted']}", err=True, fg=typer.colors.RED)
    elif failed:
        typer.secho(f"error: {failed} requests failed; see bench.json", err=True, fg=typer.colors.RED)
    if document["aborted"] or failed:
        raise typer.Exit(EXIT_FAILED_REQUESTS)


def _title(document: dict[str, Any]) -> str:
    target = document["target"]
    where = target["url"] or "in-process"
    return f"llmflow bench: {target['model'] or 'model'} @ {where}"


def _json_object(text: str | None) -> dict[str, Any]:
    from llmflow.errors import InvalidRequest

    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest.single("extra_body", f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise InvalidRequest.single("extra_body", "must be a JSON object")
    return value


def register(app: typer.Typer) -> None:
    app.command()(bench)
