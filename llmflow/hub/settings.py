"""Where the Hub is and how to reach it, read from huggingface_hub's own environment variables
when a download starts (not when huggingface_hub was imported), so a process may set them late."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    cache_dir: str
    offline: bool

    @classmethod
    def from_env(cls) -> HubSettings:
        from huggingface_hub import constants

        flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
        offline = flag.strip().lower() in _TRUE if flag is not None else constants.HF_HUB_OFFLINE
        return cls(
            endpoint=(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"),
            cache_dir=os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE,
            offline=offline,
        )


def token_given() -> bool:
    """Whether downloads send a token (HF_TOKEN, or one saved by `hf auth login`)."""
    from huggingface_hub import get_token

    return get_token() is not None
