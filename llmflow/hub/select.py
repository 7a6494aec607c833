"""Which of a repo's files a Hub reference needs: pure rules over the repo's file listing.

A quantization (`:Q4_K_M`) is matched case-insensitively to the label in the GGUF files' names;
a file path names one file; with neither, a repo of safetensors is a model directory (the
transformers engine) and one of GGUF files gives its only model, else its Q4_K_M. A split GGUF
(`-00001-of-00003`) comes whole, loaded from its first part; a multimodal repo's `mmproj` file
comes along.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from llmflow.errors import HubNotFound

_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT_LABEL = re.compile(
    r"(?:^|[-._])(?P<label>I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|BF16|FP?16|FP?32)(?=$|[-._])",
    re.IGNORECASE,
)
#: a model directory's files (top level only): config, tokenizer, template, weights
_DIRECTORY_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".tiktoken")
#: the quantization picked when a repo has several and the reference names none
DEFAULT_QUANT = "Q4_K_M"


@dataclass(frozen=True)
class RepoFile:
    """A file of one revision: its path in the repo, size, and checksum as the Hub states it
    (`sha256` for a large file stored in LFS, `git_oid` the git blob id otherwise)."""

    path: str
    size: int | None = None
    sha256: str | None = None
    git_oid: str | None = None


@dataclass(frozen=True)
class Selection:
    """The files to fetch; `entry` is the one to load (a GGUF file, its first part when split),
    None for a model directory (the revision's folder)."""

    files: tuple[RepoFile, ...]
    entry: str | None


def select_files(reference: str, quant: str | None, filename: str | None, files: list[RepoFile]) -> Selection:
    """The files `reference` needs among `files`; `HubNotFound` names what is missing."""
    by_path = {f.path: f for f in files}
    ggufs = [f.path for f in files if _is_gguf(f.path) and not is_projector_file(f.path)]
    if filename is not None:
        if filename not in by_path:
            raise HubNotFound(reference, f"the repo has no file {filename!r}", sorted(ggufs))
        if not _is_gguf(filename):
            raise HubNotFound(reference, f"{filename!r} is not a .gguf file")
        return _gguf(reference, filename, by_path, ggufs)
    if quant is not None:
        return _gguf(reference, _matching(reference, quant, ggufs), by_path, ggufs)
    if any(f.path.endswith(".safetensors") and "/" not in f.path for f in files):
        kept = [f for f in files if "/" not in f.path and f.path.lower().endswith(_DIRECTORY_SUFFIXES)]
        return Selection(tuple(kept), None)
    if not ggufs:
        raise HubNotFound(reference, "the repo holds no GGUF or safetensors weights")
    entries = sorted({_first_part(path) for path in ggufs})
    if len(entries) == 1:
        return _gguf(reference, entries[0], by_path, ggufs)
    labels = {quant_label(path) for path in entries}
    if DEFAULT_QUANT in labels:
        return _gguf(reference, _matching(reference, DEFAULT_QUANT, ggufs), by_path, ggufs)
    raise HubNotFound(reference, "the repo holds several GGUF models: add :QUANT", available_quants(ggufs))


def quant_label(path: str) -> str | None:
    """The quantization a GGUF file's name (or its folder's) carries, upper-case; None if none."""
    name = PurePosixPath(path)
    stem = _SPLIT.sub(r"\g<stem>", name.name)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    for part in (stem, *reversed(name.parent.parts)):
        labels = [m.group("label") for m in _QUANT_LABEL.finditer(part)]
        if labels:
            return labels[-1].upper()
    return None


def available_quants(ggufs: list[str]) -> list[str]:
    return sorted({label for label in map(quant_label, ggufs) if label is not None})


def _matching(reference: str, quant: str, ggufs: list[str]) -> str:
    wanted = quant.upper()
    matches = sorted({_first_part(path) for path in ggufs if quant_label(path) == wanted})
    if not matches:
        raise HubNotFound(reference, f"no GGUF file of quantization {quant!r}", available_quants(ggufs))
    return matches[0]


def _gguf(reference: str, entry: str, by_path: dict[str, RepoFile], ggufs: list[str]) -> Selection:
    parts = _parts(reference, entry, by_path)
    mmproj = _mmproj(entry, list(by_path))
    return Selection(tuple(by_path[p] for p in [*parts, *mmproj]), parts[0])


def _parts(reference: str, path: str, by_path: dict[str, RepoFile]) -> list[str]:
    """Every part of a split GGUF (`path` any one of them), first part first; else `[path]`."""
    match = _SPLIT.match(path)
    if match is None:
        return [path]
    count = int(match["count"])
    names = [f"{match['stem']}-{no:05d}-of-{count:05d}.gguf" for no in range(1, count + 1)]
    missing = [name for name in names if name not in by_path]
    if missing:
        raise HubNotFound(reference, f"the split GGUF {path!r} lacks parts {missing}")
    return names


def _mmproj(entry: str, paths: list[str]) -> list[str]:
    """A multimodal repo's projector, from the entry's folder: the one of the entry's
    quantization when there are several, else the first."""
    folder = str(PurePosixPath(entry).parent)
    here = sorted(p for p in paths if is_projector_file(p) and str(PurePosixPath(p).parent) == folder)
    if not here:
        return []
    same = [p for p in here if quant_label(p) == quant_label(entry)]
    return [(same or here)[0]]


def _first_part(path: str) -> str:
    match = _SPLIT.match(path)
    return path if match is None else f"{match['stem']}-00001-of-{match['count']}.gguf"


def _is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_projector_file(path: str) -> bool:
    """A vision model's projector GGUF, by the name llama.cpp's converter gives it (`mmproj-...`)."""
    return "mmproj" in PurePosixPath(path).name.lower() and _is_gguf(path)
