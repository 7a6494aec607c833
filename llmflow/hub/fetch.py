"""The one resolver of a Hub reference: list the revision, pick its files, download the missing
ones into huggingface_hub's standard cache (shared with every other Hugging Face tool), check
each new file's checksum, and say where the model is.

A download resumes where a cut connection left it (huggingface_hub asks for the rest with an
HTTP Range); a file that arrives short or with another checksum is refused and never used.
Offline (`HF_HUB_OFFLINE=1`), or when the Hub cannot be reached, the cache alone answers.
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmflow.errors import DiskFull, DownloadFailed, HubNotFound, HubUnavailable
from llmflow.hub.failures import hub_errors, unavailable_reason
from llmflow.hub.listing import Listing, cached_listing, hub_listing
from llmflow.hub.progress import progress_class
from llmflow.hub.ref import HubRef
from llmflow.hub.select import RepoFile, is_projector_file, select_files
from llmflow.hub.settings import HubSettings
from llmflow.hub.verify import checksum_problem, discard, sha256_of

logger = logging.getLogger("llmflow.hub")


@dataclass(frozen=True)
class FetchedFile:
    """A file of the model as it is in the cache, with its checksum."""

    path: str
    local: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class HubModel:
    """A Hub model in the local cache: `path` is what to load (a GGUF file, the first part of a
    split one, or the revision's folder for a model directory)."""

    ref: HubRef
    commit: str
    files: tuple[FetchedFile, ...]
    path: Path

    def provenance(self) -> dict[str, Any]:
        """What a logged model records of its upstream weights (MLflow model metadata)."""
        return {
            "reference": str(self.ref),
            "repo": self.ref.repo_id,
            "revision": self.ref.revision or "main",
            "commit": self.commit,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }

    @property
    def companions(self) -> tuple[Path, ...]:
        """The files that go with `path`: a GGUF file's other split parts and mmproj file; a model
        directory's files (its folder may hold others too, of other references)."""
        return tuple(f.local for f in self.files if f.local != self.path)

    @property
    def projector(self) -> Path | None:
        """A GGUF model's projector (a vision model's `mmproj` file), fetched with it; None for a
        text-only model or a model directory."""
        if self.path.is_dir():
            return None
        return next((f.local for f in self.files if is_projector_file(f.path)), None)


_Key = tuple[HubRef, HubSettings]
_fetched: dict[_Key, HubModel] = {}
#: one lock per reference: a model being downloaded holds up only those who want it too
_locks: dict[_Key, threading.Lock] = {}
_lock = threading.Lock()


def fetch(ref: HubRef, *, show_bar: bool | None = None) -> HubModel:
    """The model `ref` names, downloaded when it is not cached yet. Raises llmflow errors
    (`HubNotFound`, `HubAccessDenied`, `HubUnavailable`, `DownloadFailed`, `DiskFull`). Within
    one process a reference is listed once: a reload uses the same commit."""
    key = (ref, HubSettings.from_env())
    with _lock:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        known = _fetched.get(key)
        if known is not None and all(f.local.exists() for f in known.files):
            return known
        model = _fetch(ref, key[1], show_bar)
        _fetched[key] = model
        return model


def forget() -> None:
    """Forget what this process listed: the next `fetch` asks the Hub (or the cache) again."""
    with _lock:
        _fetched.clear()


def _fetch(ref: HubRef, settings: HubSettings, show_bar: bool | None) -> HubModel:
    listing = _listing(ref, settings)
    try:
        selection = select_files(str(ref), ref.quant, ref.filename, listing.files)
    except HubNotFound as exc:
        if not listing.cached:
            raise
        held = ", ".join(exc.available) or "no matching file"
        raise HubUnavailable(
            str(ref), f"{unavailable_reason(settings)}; its cached revision {listing.commit[:12]} has {held}"
        ) from None
    missing = [f for f in selection.files if _cached(ref, listing.commit, f, settings) is None]
    if missing and listing.cached:
        raise HubUnavailable(
            str(ref), unavailable_reason(settings) + f" (missing: {[f.path for f in missing]})"
        )
    _check_space(ref, missing, settings)
    fetched = [_fetch_file(ref, listing, f, settings, show_bar) for f in selection.files]
    local = {f.path: f.local for f in fetched}
    path = local[selection.entry] if selection.entry is not None else fetched[0].local.parent
    return HubModel(ref, listing.commit, tuple(fetched), path)


def _listing(ref: HubRef, settings: HubSettings) -> Listing:
    """The Hub's listing; the cache's when offline or when the Hub cannot be reached."""
    if not settings.offline:
        try:
            with hub_errors(ref, settings):
                return hub_listing(ref, settings)
        except HubUnavailable as exc:
            cached = cached_listing(ref, settings)
            if cached is None:
                raise
            logger.warning("%s; using the cached revision %s", exc, cached.commit)
            return cached
    cached = cached_listing(ref, settings)
    if cached is None:
        raise HubUnavailable(str(ref), unavailable_reason(settings))
    return cached


def _cached(ref: HubRef, commit: str, file: RepoFile, settings: HubSettings) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(ref.repo_id, file.path, cache_dir=settings.cache_dir, revision=commit)
    return Path(found) if isinstance(found, str) else None


def _check_space(ref: HubRef, missing: list[RepoFile], settings: HubSettings) -> None:
    """Refuse before downloading what cannot fit (huggingface_hub only warns)."""
    needed = sum(f.size or 0 for f in missing)
    if not needed:
        return
    directory = Path(settings.cache_dir)
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise DiskFull(str(ref), settings.cache_dir, needed, free)


def _fetch_file(
    ref: HubRef, listing: Listing, file: RepoFile, settings: HubSettings, show_bar: bool | None
) -> FetchedFile:
    """One file from the cache, or downloaded and checked."""
    local = _cached(ref, listing.commit, file, settings)
    if local is None:
        local = _download(ref, listing, file, settings, show_bar)
    sha256 = file.sha256 or sha256_of(local)  # a large file's is the Hub's; a small one's is cheap
    return FetchedFile(file.path, local, local.stat().st_size, sha256)


def _download(
    ref: HubRef, listing: Listing, file: RepoFile, settings: HubSettings, show_bar: bool | None
) -> Path:
    from huggingface_hub import hf_hub_download

    logger.info("downloading %s from %s (%s)", file.path, ref.repo_id, listing.commit[:12])
    with hub_errors(ref, settings, file.path):
        local = Path(
            hf_hub_download(
                ref.repo_id,
                file.path,
                revision=ref.revision,  # a branch or tag is then recorded in the cache, for offline use
                cache_dir=settings.cache_dir,
                endpoint=settings.endpoint,
                tqdm_class=progress_class(file.path, show_bar),  # type: ignore[arg-type]
            )
        )
    if listing.commit not in local.parts:
        raise DownloadFailed(
            str(ref), file.path, f"the revision moved on the Hub during the download ({local})"
        )
    problem = checksum_problem(file, local)
    if problem is not None:
        discard(local)
        raise DownloadFailed(str(ref), file.path, f"{problem}; the file was removed from the cache")
    return local
