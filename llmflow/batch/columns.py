"""Which input columns feed the model: a prompt column, a `messages` column, or both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmflow.errors import BatchFileError

PROMPT = "prompt"
MESSAGES = "messages"


@dataclass(frozen=True)
class InputColumns:
    """The file's column for the model's `prompt` input and for its `messages` input (a row
    uses one of them)."""

    prompt: str | None
    messages: str | None

    def as_model_input(self) -> dict[str, str]:
        """{model input name: file column name} for the columns in use."""
        named = {PROMPT: self.prompt, MESSAGES: self.messages}
        return {name: column for name, column in named.items() if column is not None}


def input_columns(columns: Sequence[str], prompt_column: str | None = None) -> InputColumns:
    """`prompt_column` when given; else `prompt` and/or `messages`, whichever the file has."""
    if prompt_column is not None:
        if prompt_column not in columns:
            raise BatchFileError(
                f"the input has no column {prompt_column!r}; its columns: {', '.join(columns)}"
            )
        return InputColumns(prompt_column, None)
    found = InputColumns(PROMPT if PROMPT in columns else None, MESSAGES if MESSAGES in columns else None)
    if found.prompt is None and found.messages is None:
        raise BatchFileError(
            "the input has no `prompt` or `messages` column; name the prompt column with "
            f"--prompt-column (its columns: {', '.join(columns) or 'none'})"
        )
    return found
