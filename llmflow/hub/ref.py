"""`hf://ORG/REPO[:QUANT | /path/file.gguf][@revision]`: a model named on the Hugging Face Hub.

Only the grammar lives here (no network, no cache); `llmflow.model_files.parse_model_ref`, the one
parser of every command's MODEL, calls `HubRef.parse` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from llmflow.errors import InvalidParams

SCHEME = "hf://"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_QUANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
FORM = "hf://ORG/REPO[:QUANT | /path/file.gguf][@revision]"


@dataclass(frozen=True)
class HubRef:
    """A Hub model: the repo, at most one of a quantization or a file path, and a revision (a
    branch, tag or commit; None is the repo's default branch)."""

    repo_id: str
    quant: str | None = None
    filename: str | None = None
    revision: str | None = None

    @classmethod
    def parse(cls, text: str) -> HubRef | None:
        """The reference `text` spells, None when it is not an `hf://` reference at all; a
        malformed one is an `InvalidParams` naming `model` and the expected form."""
        if not text.startswith(SCHEME):
            return None
        body, at, revision = text.removeprefix(SCHEME).partition("@")
        if at and not _REVISION.match(revision):
            _refuse(text, f"{revision!r} is not a revision (a branch, tag or commit)")
        parts = body.split("/")
        if len(parts) < 2:
            _refuse(text, "it needs ORG/REPO")
        org, repo, path = parts[0], parts[1], parts[2:]
        repo, colon, quant = repo.partition(":")
        if not (_NAME.match(org) and _NAME.match(repo)):
            _refuse(text, f"{org}/{repo!s} is not a repo id")
        if colon and path:
            _refuse(text, "give a quantization or a file path, not both")
        if colon and not _QUANT.match(quant):
            _refuse(text, f"{quant!r} is not a quantization (such as Q4_K_M)")
        if path and any(part in ("", ".", "..") for part in path):
            _refuse(text, f"{'/'.join(path)!r} is not a file path in the repo")
        return cls(
            f"{org}/{repo}",
            quant=quant if colon else None,
            filename="/".join(path) or None,
            revision=revision if at else None,
        )

    def __str__(self) -> str:
        text = SCHEME + self.repo_id
        if self.quant is not None:
            text += f":{self.quant}"
        if self.filename is not None:
            text += f"/{self.filename}"
        return text + (f"@{self.revision}" if self.revision is not None else "")


def _refuse(text: str, why: str) -> NoReturn:
    raise InvalidParams.single("model", f"{text!r} is not a Hub reference ({FORM}): {why}")
