"""Which input columns feed the model: a prompt column, a `messages` column, or both, and
optionally an image column (one image per row: bytes, base64 text, a data URI or a file path)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmflow.errors import BatchFileError

PROMPT = "prompt"
MESSAGES = "messages"


@dataclass(frozen=True)
class InputColumns:
    """The file's column for the model's `prompt` input and for its `messages` input (a row
    uses one of them), and the column of each row's image, if any."""

    prompt: str | None
    messages: str | None
    image: str | None = None

    def as_model_input(self) -> dict[str, str]:
        """{model input name: file column name} for the text columns in use (the image column is
        read into the model's `images` by the batch itself: it may name files)."""
        named = {PROMPT: self.prompt, MESSAGES: self.messages}
        return {name: column for name, column in named.items() if column is not None}


def input_columns(
    columns: Sequence[str], prompt_column: str | None = None, image_column: str | None = None
) -> InputColumns:
    """`prompt_column` when given; else `prompt` and/or `messages`, whichever the file has; and
    `image_column` when given."""
    if image_column is not None and image_column not in columns:
        raise BatchFileError(
            f"the input has no image column {image_column!r}; its columns: {', '.join(columns)}"
        )
    if prompt_column is not None:
        if prompt_column not in columns:
            raise BatchFileError(
                f"the input has no column {prompt_column!r}; its columns: {', '.join(columns)}"
            )
        return _checked(InputColumns(prompt_column, None, image_column))
    found = InputColumns(
        PROMPT if PROMPT in columns else None, MESSAGES if MESSAGES in columns else None, image_column
    )
    if found.prompt is None and found.messages is None:
        raise BatchFileError(
            "the input has no `prompt` or `messages` column; name the prompt column with "
            f"--prompt-column (its columns: {', '.join(columns) or 'none'})"
        )
    return _checked(found)


def _checked(found: InputColumns) -> InputColumns:
    if found.image is not None and found.image in (found.prompt, found.messages):
        raise BatchFileError(f"the image column {found.image!r} is also the prompt or messages column")
    return found
