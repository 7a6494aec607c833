"""`llmflow models`: the Hugging Face Hub models in the local cache (every tool's downloads, as
huggingface_hub's cache is shared) with their sizes; `llmflow models rm REF` removes one."""

from __future__ import annotations

from typing import Annotated

import typer

from llmflow.cli.common import exit_on_llmflow_error

models_app = typer.Typer(
    name="models",
    help="Hub models in the local cache: list them (the default), or remove one.",
    no_args_is_help=False,
    invoke_without_command=True,
)


@models_app.callback()
def models(ctx: typer.Context) -> None:
    """List the Hub models in the local cache: repo, size, revisions (commit, branches and tags)."""
    if ctx.invoked_subcommand is not None:
        return
    from llmflow.hub.cache import cached_models

    with exit_on_llmflow_error():
        cached = cached_models()
    if not cached:
        typer.secho("no Hub models in the local cache", err=True)
        return
    for model in cached:
        typer.echo(f"hf://{model.repo_id}\t{_size(model.size)}")
        for revision in model.revisions:
            refs = f" ({', '.join(revision.refs)})" if revision.refs else ""
            typer.echo(
                f"  @{revision.commit[:12]}{refs}\t{_size(revision.size)}\t{len(revision.files)} file(s)"
            )


@models_app.command("rm")
def remove(
    reference: Annotated[
        str,
        typer.Argument(
            metavar="REF",
            help="hf://ORG/REPO (every revision), hf://ORG/REPO@revision, or hf://ORG/REPO:QUANT / "
            "hf://ORG/REPO/file.gguf (those files only)",
        ),
    ],
) -> None:
    """Remove a Hub model (or one revision, or some files) from the local cache."""
    from llmflow.errors import InvalidParams
    from llmflow.hub.cache import remove as remove_cached
    from llmflow.model_files import parse_model_ref

    with exit_on_llmflow_error():
        hub = parse_model_ref(reference).hub
        if hub is None:
            raise InvalidParams.single("model", f"{reference!r} is not a Hub model (hf://ORG/REPO...)")
        freed = remove_cached(hub)
    typer.secho(f"removed {hub}: {_size(freed)} freed", err=True)


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def register(app: typer.Typer) -> None:
    app.add_typer(models_app)
