"""MODEL on every command line (`serve`, `chat`, `bench`, `batch`): one parser, one set of rules.

A model reference is an MLflow model when it is a directory with an `MLmodel` file, or a model
URI (`models:/chat/1`, `runs:/<id>/model`, `s3://...`, `file:/...`) that is not an existing
local path; anything else is weights (a GGUF file or a model directory; None is the embedded
model). `resolve` loads either, applying engine, engine-option, parallel and thread overrides the
same way: to the weights' engine, or to what a logged llmflow model recorded (its `model_config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmflow.errors import InvalidParams, ModelNotFound

if TYPE_CHECKING:
    from mlflow.pyfunc import PyFuncModel

    from llmflow.llm import LLM

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/")
MLMODEL = "MLmodel"


@dataclass(frozen=True)
class ModelRef:
    """What MODEL names: `location` is a local path (expanded) or a URI; None, the embedded model."""

    location: str | None
    #: an MLflow model (URI or saved model directory), not weights
    logged: bool

    @property
    def name(self) -> str:
        """A client-facing name: `models:/chat/3` -> chat, `runs:/abc/model` -> model, a path -> its
        name (a weights file keeps its suffix here; the LLM names itself)."""
        source = self.location or "model"
        if source.startswith("models:/"):
            rest = source.removeprefix("models:/").strip("/")
            return re.split(r"[/@]", rest, maxsplit=1)[0] or "model"
        return Path(source.rstrip("/")).name or "model"


def parse_model_ref(model: str | Path | None) -> ModelRef:
    if model is None:
        return ModelRef(None, logged=False)
    source = str(model)
    path = Path(source).expanduser()
    if (path / MLMODEL).is_file():
        return ModelRef(str(path.resolve()), logged=True)
    if _URI.match(source) and not path.exists():
        return ModelRef(source, logged=True)
    return ModelRef(str(path), logged=False)


@dataclass
class Resolved:
    """A loaded model: an llmflow `LLM`, a pyfunc model, or both (a logged llmflow model)."""

    ref: ModelRef
    llm: LLM | None = None
    pyfunc: PyFuncModel | None = None


def resolve(
    model: str | Path | ModelRef | None,
    *,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
    parallel: int | None = None,
    threads: int | None = None,
    concurrent: bool = False,
) -> Resolved:
    """Load what `model` names. `concurrent`: generations will run from several threads at once
    (a server), so a GGUF model gets the engine that batches them unless `engine` names another;
    `parallel` sets how many it decodes together; `threads`, the engine's CPU threads (unless
    `engine_options` name them). For a logged llmflow model these override what was logged; a
    model of another kind takes no engine overrides (and ignores `threads`)."""
    ref = model if isinstance(model, ModelRef) else parse_model_ref(model)
    options = dict(engine_options or {})
    if ref.logged:
        assert ref.location is not None
        overrides = None
        if engine is not None or options or parallel is not None or threads is not None or concurrent:
            overrides = _logged_overrides(ref.location, engine, options, parallel, threads, concurrent)
        pyfunc = load_pyfunc(ref.location, overrides)
        from llmflow.mlflow.model import find_llm

        return Resolved(ref, llm=find_llm(pyfunc), pyfunc=pyfunc)
    from llmflow.engines import guess_engine
    from llmflow.llm import LLM
    from llmflow.model_files import resolve_model_path

    engine = engine or guess_engine(resolve_model_path(ref.location), concurrent=concurrent)
    options = _with_threads(engine, with_parallel(engine, options, parallel), threads)
    llm = LLM.load(ref.location, engine=engine, engine_options=options)
    return Resolved(ref, llm=llm)


def load_pyfunc(location: str, model_config: dict[str, Any] | None = None) -> PyFuncModel:
    import mlflow.pyfunc

    try:
        return mlflow.pyfunc.load_model(location, model_config=model_config)
    except OSError as exc:
        raise ModelNotFound(f"could not load the MLflow model {location!r}: {exc}") from None


def _logged_overrides(
    location: str,
    engine: str | None,
    options: dict[str, Any],
    parallel: int | None,
    threads: int | None,
    concurrent: bool,
) -> dict[str, Any] | None:
    """The `model_config` keys to change when loading a logged model: for an llmflow model, its
    engine (the batching one when `concurrent`) and engine options (MLflow replaces a key as a
    whole, so the logged options are kept under the new ones); None when nothing changes."""
    config = logged_llmflow_config(location)
    if config is None:
        if engine or options or parallel is not None:
            raise InvalidParams.single(
                "engine", "engine, engine options and parallel apply to llmflow models and model files only"
            )
        return None
    from llmflow.engines import batching_engine

    logged_engine = config["engine"]
    name = engine or (batching_engine(logged_engine) if concurrent else logged_engine)
    logged = config.get("engine_options") or {}
    merged = with_parallel(name, {**logged, **_with_threads(name, options, threads)}, parallel)
    if name == logged_engine and merged == logged:
        return None
    return {"engine": name, "engine_options": merged}


def logged_llmflow_config(location: str) -> dict[str, Any] | None:
    """The `model_config` of a logged llmflow model (read from its MLmodel file alone), or None
    for any other model."""
    from mlflow.models import Model

    try:
        meta = Model.load(location)
    except Exception as exc:  # MLflow raises many kinds for a missing model
        raise ModelNotFound(f"could not load the MLflow model {location!r}: {exc}") from None
    config = (meta.flavors.get("python_function") or {}).get("config")
    if not isinstance(config, dict) or "engine" not in config or "llmflow_version" not in config:
        return None
    return config


def with_parallel(engine: str, options: dict[str, Any], parallel: int | None) -> dict[str, Any]:
    if parallel is None:
        return options
    from llmflow.engines import engine_class

    if not engine_class(engine).concurrent:
        raise InvalidParams.single(
            "parallel",
            f"the {engine} engine decodes one generation at a time; "
            "--parallel needs a batching engine (llama_cpp_batched for a GGUF model)",
        )
    return {**options, "parallel": parallel}


def _with_threads(engine: str, options: dict[str, Any], threads: int | None) -> dict[str, Any]:
    """`threads` as the engine's thread option, unless the options set it already."""
    if threads is None:
        return options
    from llmflow.engines import engine_class

    option = engine_class(engine).thread_option
    if option is None or option in options:
        return options
    return {**options, option: threads}
