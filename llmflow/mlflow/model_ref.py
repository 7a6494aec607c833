"""MODEL on every command line (`serve`, `chat`, `bench`, `batch`), loaded.

What MODEL names is parsed in one place, `llmflow.model_files.parse_model_ref` (weights, a Hub
model, or an MLflow model). `resolve` loads it as a `LoadSpec` says: weights (a Hub model's
downloaded first) with it, or a logged llmflow model with its fields over what the model
recorded (its `model_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmflow.errors import InvalidParams, ModelNotFound
from llmflow.load_spec import LoadSpec
from llmflow.model_files import ModelRef, parse_model_ref

if TYPE_CHECKING:
    from mlflow.pyfunc import PyFuncModel

    from llmflow.llm import LLM


@dataclass
class Resolved:
    """A loaded model: an llmflow `LLM`, a pyfunc model, or both (a logged llmflow model)."""

    ref: ModelRef
    llm: LLM | None = None
    pyfunc: PyFuncModel | None = None


def resolve(
    model: str | Path | ModelRef | None, spec: LoadSpec | None = None, *, concurrent: bool = False
) -> Resolved:
    """Load what `model` names, as `spec` says. `concurrent`: generations will run from several
    threads at once (a server), so a GGUF model gets the engine that batches them unless the spec
    names another. For a logged llmflow model the spec's fields override what was logged (its
    `threads` those of the logged engine options too); a model of another kind takes none (and
    ignores `threads`)."""
    ref = model if isinstance(model, ModelRef) else parse_model_ref(model)
    spec = spec or LoadSpec()
    if ref.logged:
        assert ref.location is not None
        overrides = None
        if spec.changes() or concurrent:
            overrides = _logged_overrides(ref.location, spec, concurrent)
        pyfunc = load_pyfunc(ref.location, overrides)
        from llmflow.mlflow.model import find_llm

        return Resolved(ref, llm=find_llm(pyfunc), pyfunc=pyfunc)
    from llmflow.llm import LLM

    return Resolved(ref, llm=LLM.from_spec(spec, ref.location, concurrent=concurrent))


def load_pyfunc(location: str, model_config: dict[str, Any] | None = None) -> PyFuncModel:
    import mlflow.pyfunc

    try:
        return mlflow.pyfunc.load_model(location, model_config=model_config)
    except OSError as exc:
        raise ModelNotFound(f"could not load the MLflow model {location!r}: {exc}") from None


def _logged_overrides(location: str, spec: LoadSpec, concurrent: bool) -> dict[str, Any] | None:
    """The `model_config` keys to change when loading a logged model: for an llmflow model, the
    spec's changes, its engine (the batching one when `concurrent`) and engine options (MLflow
    replaces a key as a whole, so the logged options are kept under the new ones, with `threads`
    and `parallel` written in); None when nothing changes."""
    config = logged_llmflow_config(location)
    changes = spec.changes()
    changes.pop("threads", None)  # a model of another kind ignores threads
    if config is None:
        if changes:
            raise InvalidParams.single(
                "engine", "engine, engine options and parallel apply to llmflow models and model files only"
            )
        return None
    from llmflow.engines import batching_engine

    logged_engine = config["engine"]
    name = spec.engine or (batching_engine(logged_engine) if concurrent else logged_engine)
    logged = config.get("engine_options") or {}
    merged = {**logged, **spec.engine_options_for(name)}
    for folded in ("engine", "engine_options", "parallel"):
        changes.pop(folded, None)
    if name == logged_engine and merged == logged and not changes:
        return None
    return {**changes, "engine": name, "engine_options": merged}


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
