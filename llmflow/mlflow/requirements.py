"""The pip requirements written into a logged model.

MLflow never installs them when it loads a model in the current environment
(`mlflow.pyfunc.load_model`); it only warns when an installed version differs. They matter when a
tool builds a fresh environment for the model (`mlflow models serve --env-manager uv`, Docker
images, Spark UDFs with an env manager).

- The engine's packages are pinned to the installed versions (`llama-cpp-python==0.3.36`).
- llmflow itself is `llmflow @ <url>` when it was installed from a Git or archive URL (pip records
  that), else `llmflow==<version>`, which only an index that hosts llmflow can satisfy: log with
  `pip_requirements=[...]` naming an installable llmflow (a Git URL or a wheel) to serve the
  model from a fresh environment.
"""

from __future__ import annotations

import importlib.metadata
import json

from llmflow import __version__
from llmflow.engines import engine_class

DISTRIBUTION = "llmflow"


def default_requirements(engine: str) -> list[str]:
    return [llmflow_requirement(), *engine_requirements(engine)]


def llmflow_requirement() -> str:
    """How pip can install the llmflow that is running now, as far as pip recorded it."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return f"{DISTRIBUTION}=={__version__}"
    url = _direct_url(dist.read_text("direct_url.json"))
    return f"{DISTRIBUTION} @ {url}" if url else f"{DISTRIBUTION}=={dist.version}"


def engine_requirements(engine: str) -> list[str]:
    """The engine's packages (its `pip_packages`), pinned to the installed versions."""
    packages = engine_class(engine).pip_packages
    pinned = []
    for package in packages:
        try:
            pinned.append(f"{package}=={_public_version(importlib.metadata.version(package))}")
        except importlib.metadata.PackageNotFoundError:
            pinned.append(package)
    return pinned


def _public_version(version: str) -> str:
    """Drop a local version label (`2.13.0+cpu` -> `2.13.0`): package indexes never serve one,
    so a pin that keeps it cannot be installed anywhere else."""
    return version.split("+", 1)[0]


def _direct_url(text: str | None) -> str | None:
    """A URL another machine can install from (PEP 610), or None for local paths."""
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    url = info.get("url", "")
    if not url or url.startswith("file:"):
        return None
    vcs = info.get("vcs_info")
    if vcs:
        commit = vcs.get("commit_id")
        return f"{vcs['vcs']}+{url}@{commit}" if commit else f"{vcs['vcs']}+{url}"
    return url if "archive_info" in info else None
