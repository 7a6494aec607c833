"""The `llmflow` command line. Each command lives in its own module; heavy imports stay inside
the command functions so that `llmflow --help` is instant."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="llmflow",
    help="Run a local LLM as an MLflow model that streams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Run a local LLM as an MLflow model that streams."""
    from llmflow.cli.common import show_hub_progress

    show_hub_progress()


def _register_commands() -> None:
    from llmflow.cli import batch, bench, chat, generate, log, models, pull, serve

    generate.register(app)
    bench.register(app)
    log.register(app)
    chat.register(app)
    serve.register(app)
    batch.register(app)
    pull.register(app)
    models.register(app)


_register_commands()

__all__ = ["app"]
