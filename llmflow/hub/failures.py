"""huggingface_hub's exceptions as llmflow errors that name the reference and what to do."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from llmflow.errors import DiskFull, DownloadFailed, HubAccessDenied, HubNotFound, HubUnavailable
from llmflow.hub.ref import HubRef
from llmflow.hub.settings import HubSettings, token_given


@contextmanager
def hub_errors(ref: HubRef, settings: HubSettings, path: str | None = None) -> Iterator[None]:
    """Translate what a Hub call raises; `path` is the file being downloaded, if any."""
    import httpx2
    from huggingface_hub import errors

    reference = str(ref)
    try:
        yield
    except errors.GatedRepoError:
        raise HubAccessDenied(reference, ref.repo_id, token_given()) from None
    except errors.RepositoryNotFoundError:
        raise HubNotFound(
            reference,
            f"no repo {ref.repo_id} on the Hub at {settings.endpoint} (or it is private: set HF_TOKEN)",
        ) from None
    except errors.RevisionNotFoundError:
        raise HubNotFound(reference, f"the repo {ref.repo_id} has no revision {ref.revision!r}") from None
    except errors.RemoteEntryNotFoundError:
        raise HubNotFound(reference, f"the repo {ref.repo_id} has no file {path!r}") from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise HubAccessDenied(reference, ref.repo_id, token_given()) from None
        raise HubUnavailable(reference, f"the Hub at {settings.endpoint} answered {status}") from None
    except (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError):
        raise HubUnavailable(reference, unavailable_reason(settings)) from None
    except (httpx2.TransportError, ConnectionError) as exc:
        raise HubUnavailable(reference, f"the Hub at {settings.endpoint} cannot be reached: {exc}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFull(reference, settings.cache_dir) from None
        if path is not None:
            raise DownloadFailed(reference, path, str(exc)) from None
        raise


def unavailable_reason(settings: HubSettings) -> str:
    if settings.offline:
        return "HF_HUB_OFFLINE=1 forbids downloading it (pull it while online: llmflow pull)"
    return f"the Hub at {settings.endpoint} cannot be reached"
