"""What a server serves: an llmflow `LLM` (OpenAI routes and /invocations), or any MLflow pyfunc
model (/invocations only, streaming when it implements `predict_stream`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.pyfunc import PyFuncModel

    from llmflow.llm import LLM
    from llmflow.mlflow.model import LlmflowPyfuncModel
    from llmflow.mlflow.responses_agent import LlmflowResponsesAgent


@dataclass
class ServedModel:
    """The loaded model and the name clients call it by. `llmflow_model` is the llmflow pyfunc
    model inside `pyfunc` (None for a third-party model): /invocations streams it through the
    server's own pipeline. `agent` is the llmflow ResponsesAgent inside `pyfunc` (a model logged
    with `interface="responses"`): its /invocations speaks the Responses format."""

    name: str
    llm: LLM | None = None
    pyfunc: PyFuncModel | None = None
    llmflow_model: LlmflowPyfuncModel | None = None
    agent: LlmflowResponsesAgent | None = None

    @classmethod
    def from_llm(cls, llm: LLM, name: str | None = None) -> ServedModel:
        return cls.from_pyfunc(pyfunc_for_llm(llm), name or llm.model_name, llm=llm)

    @classmethod
    def from_pyfunc(cls, pyfunc: PyFuncModel | None, name: str, llm: LLM | None = None) -> ServedModel:
        llmflow_model, agent = _find_llmflow_models(pyfunc)
        if llm is None:
            inner = llmflow_model or agent
            llm = inner.llm if inner is not None else None
        return cls(name, llm=llm, pyfunc=pyfunc, llmflow_model=llmflow_model, agent=agent)

    def responses_agent(self) -> LlmflowResponsesAgent | None:
        """What reads a ResponsesAgent request (`/responses`): the served agent, or one around the
        served LLM; None for a third-party model."""
        if self.agent is not None or self.llm is None:
            return self.agent
        from llmflow.mlflow.responses_agent import LlmflowResponsesAgent

        return LlmflowResponsesAgent.from_llm(self.llm)

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


def load_served(model: str | Path | None = None, *, name: str | None = None, **options: Any) -> ServedModel:
    """Load what `llmflow serve MODEL` serves (see `llmflow.mlflow.model_ref`); None is the
    embedded default model; `options` are the fields of `LoadSpec` (engine, engine_options,
    parallel, threads, ...). A server runs generations concurrently, so a GGUF model (a file, or
    a logged llmflow model whose engine is `llama_cpp`) gets the engine that batches them unless
    `engine` names another."""
    from llmflow.load_spec import LoadSpec
    from llmflow.mlflow.model_ref import resolve

    resolved = resolve(model, LoadSpec.parse(options), concurrent=True)
    if resolved.pyfunc is not None:
        return ServedModel.from_pyfunc(resolved.pyfunc, name or resolved.ref.name)
    assert resolved.llm is not None
    return ServedModel.from_llm(resolved.llm, name)


def _find_llmflow_models(pyfunc: Any) -> tuple[LlmflowPyfuncModel | None, LlmflowResponsesAgent | None]:
    """The llmflow python model inside `pyfunc`, by interface."""
    if pyfunc is None:
        return None, None
    try:
        from llmflow.mlflow.model import find_llmflow_model, unwrap_python_model
        from llmflow.mlflow.responses_agent import LlmflowResponsesAgent
    except ImportError:  # llmflow's MLflow flavor is not available: serve the model as any pyfunc
        return None, None
    agent = unwrap_python_model(pyfunc)
    return find_llmflow_model(pyfunc), agent if isinstance(agent, LlmflowResponsesAgent) else None


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
