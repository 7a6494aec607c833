"""What huggingface_hub's cache holds (every tool's downloads, not only llmflow's), and removing
a model from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmflow.errors import HubNotFound
from llmflow.hub.listing import cached_files
from llmflow.hub.ref import HubRef
from llmflow.hub.select import select_files
from llmflow.hub.settings import HubSettings

if TYPE_CHECKING:
    from huggingface_hub import CachedRevisionInfo, HFCacheInfo


@dataclass(frozen=True)
class CachedRevision:
    commit: str
    refs: tuple[str, ...]
    size: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    #: on disk, blobs shared by revisions counted once
    size: int
    revisions: tuple[CachedRevision, ...]


def cached_models(settings: HubSettings | None = None) -> list[CachedModel]:
    """The model repos in the cache, by name."""
    cache = _scan(settings or HubSettings.from_env())
    if cache is None:
        return []
    models = []
    for repo in cache.repos:
        if repo.repo_type != "model":
            continue
        revisions = tuple(
            CachedRevision(
                r.commit_hash,
                tuple(sorted(r.refs)),
                r.size_on_disk,
                tuple(sorted(Path(f.file_path).relative_to(r.snapshot_path).as_posix() for f in r.files)),
            )
            for r in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)
        )
        models.append(CachedModel(repo.repo_id, repo.size_on_disk, revisions))
    return sorted(models, key=lambda m: m.repo_id.lower())


def remove(ref: HubRef, settings: HubSettings | None = None) -> int:
    """Remove what `ref` names from the cache, return the bytes freed: the whole repo; with a
    revision, that revision; with a quantization or file, those files (of the revision)."""
    settings = settings or HubSettings.from_env()
    cache = _scan(settings)
    repo = (
        next((r for r in cache.repos if r.repo_id == ref.repo_id and r.repo_type == "model"), None)
        if cache
        else None
    )
    if repo is None:
        raise HubNotFound(str(ref), "it is not in the local Hugging Face cache")
    revisions = list(repo.revisions)
    if ref.revision is not None:
        revisions = [r for r in revisions if r.commit_hash == ref.revision or ref.revision in r.refs]
        if not revisions:
            raise HubNotFound(str(ref), f"the cache holds no revision {ref.revision!r} of {ref.repo_id}")
    if ref.quant is None and ref.filename is None:
        assert cache is not None
        strategy = cache.delete_revisions(*(r.commit_hash for r in revisions))
        strategy.execute()
        return strategy.expected_freed_size
    return _remove_files(ref, revisions, list(repo.revisions))


def _remove_files(
    ref: HubRef, revisions: list[CachedRevisionInfo], every_revision: list[CachedRevisionInfo]
) -> int:
    """Remove the files `ref` selects from each of `revisions`; a blob goes when no other cached
    file links to it."""
    freed = 0
    for revision in revisions:
        selection = select_files(str(ref), ref.quant, ref.filename, cached_files(revision))
        wanted = {f.path for f in selection.files}
        for file in revision.files:
            if Path(file.file_path).relative_to(revision.snapshot_path).as_posix() not in wanted:
                continue
            Path(file.file_path).unlink(missing_ok=True)
            if not _linked_elsewhere(Path(file.blob_path), every_revision):
                freed += file.size_on_disk
                Path(file.blob_path).unlink(missing_ok=True)
    return freed


def _linked_elsewhere(blob: Path, revisions: list[CachedRevisionInfo]) -> bool:
    return any(
        Path(f.file_path).is_symlink() and Path(f.file_path).resolve() == blob.resolve()
        for r in revisions
        for f in r.files
    )


def _scan(settings: HubSettings) -> HFCacheInfo | None:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        return scan_cache_dir(settings.cache_dir)
    except CacheNotFound:
        return None
