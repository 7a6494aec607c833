"""A revision's files and commit: asked of the Hub, or read from the local cache alone (offline,
or when the Hub cannot be reached)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmflow.hub.ref import HubRef
from llmflow.hub.select import RepoFile
from llmflow.hub.settings import HubSettings

if TYPE_CHECKING:
    from huggingface_hub import CachedRevisionInfo

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Listing:
    commit: str
    files: list[RepoFile]
    #: read from the local cache: nothing can be downloaded
    cached: bool = False


def hub_listing(ref: HubRef, settings: HubSettings) -> Listing:
    """The revision's commit and files with their sizes and checksums, from the Hub's API.
    Raises huggingface_hub's errors (the caller translates them)."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=settings.endpoint).model_info(
        ref.repo_id, revision=ref.revision, files_metadata=True
    )
    files = [
        RepoFile(
            s.rfilename,
            size=s.lfs.size if s.lfs else s.size,
            sha256=s.lfs.sha256 if s.lfs else None,
            git_oid=None if s.lfs else s.blob_id,
        )
        for s in info.siblings or []
    ]
    if info.sha is None:
        raise OSError(f"the Hub at {settings.endpoint} named no commit for {ref}")
    return Listing(info.sha, files)


def cached_listing(ref: HubRef, settings: HubSettings) -> Listing | None:
    """The revision as the local cache holds it (its branch or tag resolved through the cache's
    refs), or None when it holds none of it. A cached file's checksum is its blob's name."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(settings.cache_dir)
    except CacheNotFound:
        return None
    revision = ref.revision or "main"
    for repo in cache.repos:
        if repo.repo_id != ref.repo_id or repo.repo_type != "model":
            continue
        for cached in repo.revisions:
            if cached.commit_hash == revision or revision in cached.refs:
                return Listing(cached.commit_hash, cached_files(cached), cached=True)
    return None


def cached_files(revision: CachedRevisionInfo) -> list[RepoFile]:
    files = []
    for file in revision.files:
        name = Path(file.blob_path).name
        files.append(
            RepoFile(
                Path(file.file_path).relative_to(revision.snapshot_path).as_posix(),
                size=file.size_on_disk,
                sha256=name if _SHA256.match(name) else None,
                git_oid=name if _COMMIT.match(name) else None,
            )
        )
    return files
