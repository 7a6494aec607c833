"""`llmflow generate`: one streamed answer from a model (a file or a Hub model), straight to the terminal."""

from __future__ import annotations

from typing import Annotated

import typer

from llmflow.cli.common import exit_on_llmflow_error, print_stream


def generate(
    prompt: Annotated[str, typer.Argument(help="what to ask")],
    model: Annotated[
        str | None,
        typer.Option(
            help="a GGUF file, a model directory or hf://ORG/REPO[:QUANT]; default: the embedded "
            "SmolLM2-135M-Instruct",
            show_default=False,
        ),
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="tokens to generate at most")] = 256,
    temperature: Annotated[float, typer.Option(help="0 = greedy")] = 0.8,
    stop: Annotated[list[str] | None, typer.Option(help="a stop string (repeatable)")] = None,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    system: Annotated[str | None, typer.Option(help="system prompt")] = None,
    raw: Annotated[bool, typer.Option(help="no chat template: continue the prompt as is")] = False,
    show_tokens: Annotated[bool, typer.Option(help="put | between streamed chunks")] = False,
) -> None:
    """Stream an answer, then print time to first token and decode speed."""
    from llmflow.llm import LLM

    with exit_on_llmflow_error():
        llm = LLM.load(model)
        params = {"max_tokens": max_tokens, "temperature": temperature, "stop": stop or [], "seed": seed}
        chunks = llm.stream(prompt, params, system_prompt=system, raw=raw)
        _, finish, timer = print_stream(chunks, separator="|" if show_tokens else "")
    typer.secho(f"[{timer.summary()} · finish: {finish.value if finish else 'n/a'}]", err=True, dim=True)


def register(app: typer.Typer) -> None:
    app.command()(generate)
