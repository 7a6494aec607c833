"""`llmflow pull REF`: download a Hugging Face Hub model into the local cache, and nothing else;
`llmflow serve` downloads its Hub models the same way before it binds its port."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from llmflow.cli.common import exit_on_llmflow_error

if TYPE_CHECKING:
    from llmflow.hub import HubModel


def pull(
    reference: Annotated[
        str,
        typer.Argument(
            metavar="REF",
            help="hf://ORG/REPO[:QUANT | /path/file.gguf][@revision], e.g. hf://org/repo:Q4_K_M",
        ),
    ],
) -> None:
    """Download a model from the Hugging Face Hub (resumed when cut, checksums verified); print
    the local path to load."""
    with exit_on_llmflow_error():
        model = download(reference, _say)
    typer.echo(str(model.path))


def download_all(references: Iterable[str | None], say: Callable[[str], None]) -> None:
    """Download each Hub model among `references` (other kinds are left alone)."""
    from llmflow.model_files import parse_model_ref

    for reference in references:
        if parse_model_ref(reference).hub is not None:
            assert reference is not None
            download(reference, say)


def download(reference: str, say: Callable[[str], None]) -> HubModel:
    """Download one Hub model, saying what and how much; a non-Hub reference is an error."""
    from llmflow.errors import InvalidParams
    from llmflow.hub import fetch
    from llmflow.model_files import parse_model_ref

    hub = parse_model_ref(reference).hub
    if hub is None:
        raise InvalidParams.single("model", f"{reference!r} is not a Hub model (hf://ORG/REPO...)")
    say(f"fetching {hub} from the Hugging Face Hub (or the local cache)")
    model = fetch(hub)
    size = sum(f.size for f in model.files)
    say(f"{hub}: commit {model.commit}, {len(model.files)} file(s), {size / 1e6:.1f} MB in the cache")
    return model


def _say(line: str) -> None:
    typer.secho(line, err=True)


def register(app: typer.Typer) -> None:
    app.command()(pull)
