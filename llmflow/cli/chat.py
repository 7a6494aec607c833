"""`llmflow chat`: a multi-turn chat in the terminal with a logged model (or a GGUF file).

Answers stream through the model's `predict_stream`, as any MLflow client would call it.
Ctrl-C stops the current answer and keeps the conversation; Ctrl-D, /exit or Ctrl-C at the prompt
quit; /reset starts a new conversation.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from llmflow.cli.common import exit_on_llmflow_error, print_stream, tracking_store
from llmflow.types import Chunk

#: (model_input, params) -> chunk dicts, like `PyFuncModel.predict_stream`
StreamFn = Callable[[Any, dict[str, Any]], Iterator[dict[str, Any]]]

HELP = "Ctrl-C stops an answer · /reset starts over · Ctrl-D or /exit quits"


def chat(
    model: Annotated[
        str,
        typer.Argument(
            help="a model URI (models:/..., runs:/...), an MLflow model directory, a GGUF file or "
            "hf://ORG/REPO[:QUANT][@revision]"
        ),
    ],
    system: Annotated[str | None, typer.Option(help="system prompt")] = None,
    max_tokens: Annotated[int, typer.Option(help="tokens to generate at most per answer")] = 512,
    temperature: Annotated[float | None, typer.Option(help="0 = greedy; default: the model's")] = None,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    show_tokens: Annotated[bool, typer.Option(help="put | between streamed chunks, like the seed")] = False,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow tracking URI for model URIs")] = None,
) -> None:
    """Chat with a model, answers streamed token by token."""
    params: dict[str, Any] = {"max_tokens": max_tokens}
    for key, value in (("temperature", temperature), ("seed", seed), ("system_prompt", system)):
        if value is not None:
            params[key] = value
    try:
        with exit_on_llmflow_error(), tracking_store(tracking_uri):
            stream = open_model(model)
            typer.secho(HELP, err=True, dim=True)
            run_chat(stream, params, separator="|" if show_tokens else "")
    except KeyboardInterrupt:  # while loading, or a second Ctrl-C during an answer
        sys.stdout.write("\n")
        raise typer.Exit(130) from None


def open_model(model: str) -> StreamFn:
    """What MODEL names (see `llmflow.mlflow.model_ref`): weights load straight into llmflow, an
    MLflow model through MLflow (from the tracking store in effect)."""
    from llmflow.mlflow.model_ref import parse_model_ref, resolve

    resolved = resolve(parse_model_ref(model))
    if resolved.pyfunc is not None:
        return resolved.pyfunc.predict_stream
    from llmflow.mlflow.model import LlmflowPyfuncModel

    python_model = LlmflowPyfuncModel.from_llm(resolved.llm)
    return lambda data, params: python_model.predict_stream(None, data, params)


def run_chat(stream: StreamFn, params: dict[str, Any], *, separator: str = "") -> None:
    """The read-answer loop over standard input, until end of input or /exit."""
    from mlflow.exceptions import MlflowException

    messages: list[dict[str, str]] = []
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            sys.stdout.write("\n")
            return
        text = line.strip()
        if text in ("/exit", "/quit"):
            return
        if text == "/reset":
            messages.clear()
            typer.secho("(new conversation)", err=True, dim=True)
            continue
        if not text:
            continue
        messages.append({"role": "user", "content": text})
        try:
            answer, summary = answer_turn(stream, messages, params, separator)
        except MlflowException as exc:  # e.g. the conversation outgrew the context window
            messages.pop()
            typer.secho(f"error: {exc.message}", err=True, fg=typer.colors.RED)
            continue
        messages.append({"role": "assistant", "content": answer})
        typer.secho(f"[{summary} · {len(messages)} messages]", err=True, dim=True)


def answer_turn(
    stream: StreamFn, messages: list[dict[str, str]], params: dict[str, Any], separator: str
) -> tuple[str, str]:
    """Stream one answer; Ctrl-C ends it early. Returns the text shown (kept in the conversation,
    even when stopped) and a one-line summary."""
    from llmflow.mlflow.model import chunk_from_dict

    with stop_on_sigint() as stop:
        chunks = stream({"messages": list(messages)}, params)
        try:
            shown = _until(map(chunk_from_dict, chunks), stop)
            text, finish, timer = print_stream(shown, separator=separator)
        finally:
            chunks.close()
    return text, f"{timer.summary()} · finish: {finish.value if finish else 'stopped'}"


def _until(chunks: Iterator[Chunk], stop: threading.Event) -> Iterator[Chunk]:
    for chunk in chunks:
        if stop.is_set():
            return
        yield chunk


@contextmanager
def stop_on_sigint() -> Iterator[threading.Event]:
    """Ctrl-C sets an event instead of raising, so the generation ends cleanly between two tokens
    (a KeyboardInterrupt inside the engine could leave its state half-updated). A second Ctrl-C
    raises as usual, for a model that produces nothing."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def register(app: typer.Typer) -> None:
    app.command()(chat)
