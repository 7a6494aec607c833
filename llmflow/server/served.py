"""What a server serves: an llmflow `LLM` (OpenAI routes and /invocations), or any MLflow pyfunc
model (/invocations only, streaming when it implements `predict_stream`).

MODEL on the command line is a GGUF (or other engine) file, a local MLflow model directory, or a
model URI (`models:/name/1`, `runs:/<id>/model`, ...).
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


@dataclass
class ServedModel:
    """The loaded model and the name clients call it by."""

    name: str
    llm: LLM | None = None
    pyfunc: PyFuncModel | None = None

    @classmethod
    def from_llm(cls, llm: LLM, name: str | None = None) -> ServedModel:
        return cls(name or llm.model_name, llm=llm, pyfunc=pyfunc_for_llm(llm))

    @classmethod
    def from_pyfunc(cls, pyfunc: PyFuncModel, name: str) -> ServedModel:
        return cls(name, llm=_find_llm(pyfunc), pyfunc=pyfunc)

    @property
    def engine_name(self) -> str | None:
        return self.llm.engine.name if self.llm is not None else None

    @property
    def max_concurrency(self) -> int:
        """Generations the model can run at once. A third-party pyfunc model is assumed to be
        single-threaded."""
        return self.llm.engine.max_concurrency if self.llm is not None else 1

    @property
    def streams_invocations(self) -> bool:
        return self.pyfunc is not None and getattr(self.pyfunc, "_predict_stream_fn", None) is not None


def load_served(
    model: str | Path | None = None,
    *,
    name: str | None = None,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
    parallel: int | None = None,
) -> ServedModel:
    """Load what `llmflow serve MODEL` serves; None is the embedded default model.

    A server runs generations concurrently, so a GGUF model (a file, or a logged llmflow model
    whose engine is `llama_cpp`) gets the engine that batches them unless `engine` names
    another. `parallel` sets how many it decodes together. For a logged llmflow model, `engine`,
    `engine_options` and `parallel` override what was logged."""
    options = dict(engine_options or {})
    source = None if model is None else str(model)
    if source is not None and (_URI.match(source) or _is_mlflow_dir(Path(source).expanduser())):
        import mlflow.pyfunc

        location = source if _URI.match(source) else str(Path(source).expanduser())
        overrides = _logged_model_overrides(location, engine, options, parallel)
        try:
            pyfunc = mlflow.pyfunc.load_model(location, model_config=overrides)
        except OSError as exc:
            raise ModelNotFound(f"could not load the MLflow model {source!r}: {exc}") from None
        return ServedModel.from_pyfunc(pyfunc, name or model_name_of(source))
    from llmflow.engines import guess_engine
    from llmflow.llm import LLM
    from llmflow.model_files import resolve_model_path

    engine = engine or guess_engine(resolve_model_path(source), concurrent=True)
    llm = LLM.load(source, engine=engine, engine_options=_with_parallel(engine, options, parallel))
    return ServedModel.from_llm(llm, name)


def _logged_model_overrides(
    location: str, engine: str | None, options: dict[str, Any], parallel: int | None
) -> dict[str, Any] | None:
    """The `model_config` keys to change when loading a logged model: for an llmflow model, its
    engine (the batching one by default) and engine options."""
    config = _logged_llmflow_config(location)
    if config is None:
        if engine or options or parallel is not None:
            raise InvalidParams.single(
                "engine", "engine, engine options and parallel apply to llmflow models and model files only"
            )
        return None
    from llmflow.engines import batching_engine

    name = engine or batching_engine(config["engine"])
    logged = config.get("engine_options") or {}
    merged = _with_parallel(name, {**logged, **options}, parallel)
    if name == config["engine"] and merged == logged:
        return None
    return {"engine": name, "engine_options": merged}


def _logged_llmflow_config(location: str) -> dict[str, Any] | None:
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


def _with_parallel(engine: str, options: dict[str, Any], parallel: int | None) -> dict[str, Any]:
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


def model_name_of(source: str) -> str:
    """A client-facing name: `models:/chat/3` -> chat, `runs:/abc/model` -> model, a dir -> its name."""
    if source.startswith("models:/"):
        rest = source.removeprefix("models:/").strip("/")
        return re.split(r"[/@]", rest, maxsplit=1)[0] or "model"
    return Path(source.rstrip("/")).name or "model"


def _is_mlflow_dir(path: Path) -> bool:
    return path.is_dir() and (path / "MLmodel").is_file()


def _find_llm(pyfunc: Any) -> LLM | None:
    try:
        from llmflow.mlflow import find_llm
    except ImportError:  # llmflow's MLflow flavor is not available: serve the model as any pyfunc
        return None
    return find_llm(pyfunc)


class _LlmPythonModelImpl:
    """`predict`/`predict_stream` of an in-memory `LlmflowPyfuncModel`, shaped as PyFuncModel wants."""

    def __init__(self, python_model: Any):
        self.python_model = python_model

    def predict(self, data: Any, params: dict[str, Any] | None = None) -> Any:
        return self.python_model.predict(None, data, params=params)

    def predict_stream(self, data: Any, params: dict[str, Any] | None = None) -> Any:
        return self.python_model.predict_stream(None, data, params=params)


def pyfunc_for_llm(llm: LLM) -> PyFuncModel | None:
    """The LLM as a pyfunc model in memory (the same signature a logged llmflow model has), so that
    /invocations answers a GGUF file exactly as it answers the logged model."""
    try:
        from mlflow.models import Model
        from mlflow.pyfunc import PyFuncModel

        from llmflow.mlflow import LlmflowPyfuncModel
        from llmflow.mlflow.signature import build_signature
    except ImportError:
        return None
    meta = Model(signature=build_signature(llm.default_params, llm.system_prompt))
    impl = _LlmPythonModelImpl(LlmflowPyfuncModel.from_llm(llm))
    return PyFuncModel(
        model_meta=meta, model_impl=impl, predict_fn="predict", predict_stream_fn="predict_stream"
    )
