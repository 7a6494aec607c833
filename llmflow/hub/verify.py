"""A downloaded file checked against the checksum the Hub states (huggingface_hub checks only its
size): a file that differs is removed from the cache, so nothing ever loads it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from llmflow.hub.select import RepoFile

_CHUNK_BYTES = 8 * 1024 * 1024


def checksum_problem(file: RepoFile, local: Path) -> str | None:
    """What is wrong with `local` as `file`, or None when its checksum is the Hub's (or the Hub
    stated none)."""
    if file.sha256 is not None:
        actual = sha256_of(local)
        expected = file.sha256
    elif file.git_oid is not None:
        actual = _git_oid_of(local)
        expected = file.git_oid
    else:
        return None
    if actual == expected:
        return None
    return f"its checksum is {actual}, the Hub states {expected}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _git_oid_of(path: Path) -> str:
    """A file's git blob id: SHA-1 of `blob <size>\\0` and the content (the Hub's id of a file
    not stored in LFS)."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def discard(local: Path) -> None:
    """Remove a cached file: its blob and the snapshot's link to it."""
    blob = local.resolve()
    blob.unlink(missing_ok=True)
    if local.is_symlink() or local.exists():
        local.unlink(missing_ok=True)
