"""llmflow on Ray Serve: the same model reference, many replicas, streaming intact.

Optional: `pip install 'llmflow[ray]'`. `llmflow serve MODEL --ray --replicas 2` runs it from the
command line; `serve run llmflow.ray:build model=...` and `serve deploy` configs use `build`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build"]


def build(args: dict[str, Any]) -> Any:
    """The Ray Serve application for `args` (see `llmflow.ray.app.RayAppArgs`)."""
    from llmflow.ray.app import build as build_app

    return build_app(args)
