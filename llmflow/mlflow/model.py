"""The MLflow pyfunc model: `predict` answers every input row, `predict_stream` yields tokens.

Stream chunks are `{"content": delta}` dicts with non-empty text; exactly one last chunk has
`content == ""`, a `finish_reason` ("stop", "length" or "cancelled") and `usage`. So the seed's
loop works unchanged:

    for c in loaded.predict_stream({"prompt": "..."}, params={"max_tokens": 50}):
        print(c["content"], end="|")

`predict` returns a list with one answer string per input row, or with `params={"details": True}`
one `{"content", "finish_reason", "usage"}` dict per row (both serialise as JSON in MLflow's
scoring server), or with `params={"result": "struct"}` one flat record per row where a bad row
is an error record instead of a failed call (Spark's struct result: `struct_result.py`).

Observability (`observed_calls.py`): with `params={"timings": True}` the final stream chunk (and each
detail dict of `predict`) carries a `timings` object (queue_ms, ttft_ms, e2e_ms, token counts,
decode_tokens_per_s). MLflow traces are recorded when `params={"trace": True}`, when the model
was logged with `tracing=True`, or, unless either says False, when an MLflow experiment is set.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlflow.exceptions import MlflowException
from mlflow.pyfunc import PythonModel

from llmflow.errors import ModelNotFound
from llmflow.generation import Event, GenerationRequest
from llmflow.llm import collect
from llmflow.mlflow.config import WEIGHTS_ARTIFACT, ModelSpec
from llmflow.mlflow.inputs import Options, as_mlflow_error, parse_options, parse_single
from llmflow.mlflow.observed_calls import STREAM_SPAN, predict_observed, start_trace
from llmflow.mlflow.output import prepare_call
from llmflow.mlflow.predict_call import PredictCall, prepare_predict
from llmflow.mlflow.worker_cache import load_llm
from llmflow.observability import ObservedEvents, ObservedGeneration, RequestTimings, tracing_wanted
from llmflow.types import Chunk, FinishReason, Usage
from llmflow.wire.mlflow_chunks import MlflowChunksEncoder

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest, PromptInput
    from llmflow.tools import ToolPlan


class LlmflowPyfuncModel(PythonModel):
    """An `LLM` behind MLflow's pyfunc interface. Built from the MLmodel's `model_config` by
    `load_context` (models-from-code: nothing is unpickled), or around a loaded LLM by `from_llm`."""

    #: llmflow checks input itself (`llmflow.mlflow.inputs`); this tells MLflow not to wrap
    #: `predict` with its type-hint validation (`model_input` is left unannotated for the same reason)
    _skip_type_hint_validation = True

    def __init__(self) -> None:
        self.llm: LLM | None = None
        #: the model's tracing setting (model_config `tracing`); None: the auto rule
        self.tracing: bool | None = None

    @classmethod
    def from_llm(cls, llm: LLM, tracing: bool | None = None) -> LlmflowPyfuncModel:
        """Wrap an LLM loaded in this process, without MLflow loading anything."""
        model = cls()
        model.llm = llm
        model.tracing = tracing
        return model

    def load_context(self, context: Any) -> None:
        self.llm, self.tracing = llm_from_context(context)

    def predict(self, context: Any, model_input, params: dict[str, Any] | None = None) -> list[Any]:
        """One answer per input row, generated one after the other."""
        started = time.perf_counter()
        llm = self._loaded()
        call = self.prepare_predict(model_input, params)
        options = call.options
        rows = call.generated
        trace = not call.struct and tracing_wanted(options.trace, self.tracing)
        if trace or (options.timings and not call.struct):
            results = predict_observed(llm, rows, options, trace=trace, started=started)
        else:
            results = [(collect(llm.stream_prepared(row.request)), None) for row in rows]
        return call.answers(results)

    def predict_stream(
        self, context: Any, model_input, params: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Chunk dicts as tokens are generated. Bad input raises here, before the iterator."""
        timings = RequestTimings()
        llm = self._loaded()
        row, options, request, plan = self.prepare_stream(model_input, params)
        timings.admit()  # in process there is no queue: queue_ms is the time taken to prepare
        encoder = MlflowChunksEncoder(with_timings=options.timings)
        generation = llm.start(
            GenerationRequest(request, calls=None if plan is None else plan.format), timings=timings
        )
        trace = None
        if tracing_wanted(options.trace, self.tracing):
            trace = start_trace(STREAM_SPAN, llm, row, options, timings.arrived)
        elif not options.timings:  # neither: the plain stream, nothing on the token path
            return chunk_dicts(generation, encoder)
        timings.prompt_tokens = len(request.prompt_ids)
        observed = ObservedEvents(generation, generation.cancel, ObservedGeneration(timings, trace))
        return chunk_dicts(observed, encoder)

    def prepare_predict(self, model_input: Any, params: dict[str, Any] | None) -> PredictCall:
        """What `predict` checks before its first token: every row's prepared request (see
        `predict_call`). Callers that generate the rows themselves (the server) start here too."""
        return prepare_predict(self._loaded(), model_input, params)

    def prepare_stream(
        self, model_input: Any, params: dict[str, Any] | None
    ) -> tuple[PromptInput, Options, PreparedRequest, ToolPlan | None]:
        """What a stream checks before its first token: the one input, the params, the prepared
        request (and its tool plan, when it offers tools). Callers that stream the LLM themselves
        (the server) start here too."""
        llm = self._loaded()
        with as_mlflow_error():
            row = parse_single(model_input)
            options = parse_options(params, llm.default_params)
            request, plan = prepare_call(llm, row, options)
        return row, options, request, plan

    def _loaded(self) -> LLM:
        if self.llm is None:
            raise MlflowException(
                "the llmflow model has no LLM: load it with mlflow.pyfunc.load_model, or build it "
                "with LlmflowPyfuncModel.from_llm"
            )
        return self.llm


def llm_from_context(context: Any) -> tuple[LLM, bool | None]:
    """The LLM a logged model's `model_config` describes, and its tracing setting."""
    artifacts = context.artifacts or {}
    spec = ModelSpec.parse(context.model_config).with_adapters(artifacts).with_projector(artifacts)
    # inside a Spark task: the worker's already-loaded LLM, with threads that fit the task
    return load_llm(spec, weights_location(spec, artifacts)), spec.tracing


def find_llm(model: Any) -> LLM | None:
    """The LLM inside a loaded pyfunc model (an llmflow model of either interface, or the python
    model itself), None for other models."""
    python_model = unwrap_python_model(model)
    return getattr(python_model, "llm", None) if _is_llmflow(python_model) else None


def find_llmflow_model(model: Any) -> LlmflowPyfuncModel | None:
    """The `LlmflowPyfuncModel` inside a loaded pyfunc model (or itself), None for other models."""
    python_model = unwrap_python_model(model)
    return python_model if isinstance(python_model, LlmflowPyfuncModel) else None


def unwrap_python_model(model: Any) -> Any:
    """The python model inside a loaded pyfunc model (or `model` itself); None when it has none."""
    unwrap = getattr(model, "unwrap_python_model", None)
    if unwrap is None:
        return model
    try:
        return unwrap()
    except MlflowException:  # not a python model, or one MLflow wraps (a ResponsesAgent)
        pass
    try:
        return model.get_raw_model()
    except NotImplementedError:
        return None


def _is_llmflow(python_model: Any) -> bool:
    from llmflow.mlflow.responses_agent import LlmflowResponsesAgent

    return isinstance(python_model, (LlmflowPyfuncModel, LlmflowResponsesAgent))


def weights_location(spec: ModelSpec, artifacts: dict[str, str]) -> Path:
    """Where the weights are: the copied artifact, or the path recorded in reference mode."""
    if spec.weights_path is not None:
        path = Path(spec.weights_path)
        if not path.exists():
            raise ModelNotFound(
                f"this model was logged by reference to {spec.weights_path!r}, which does not exist "
                "here; put the weights there, or log the model again without by_reference so that "
                "the weights travel with it"
            )
        return path
    if WEIGHTS_ARTIFACT not in artifacts:
        raise ModelNotFound(f"the logged model has no {WEIGHTS_ARTIFACT!r} artifact with its weights")
    return Path(artifacts[WEIGHTS_ARTIFACT])


def chunk_dicts(events: Iterator[Event], encoder: MlflowChunksEncoder) -> Iterator[dict[str, Any]]:
    """A generation's chunk dicts; closing this generator closes (and so cancels) the generation."""
    chunk = encoder.chunk
    try:
        for event in events:
            body = chunk(event)
            if body is not None:
                yield body
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def chunk_to_dict(chunk: Chunk) -> dict[str, Any]:
    if not chunk.is_final:
        if chunk.logprobs:  # asked for with the `logprobs` param
            return {"content": chunk.text, "logprobs": [t.to_dict() for t in chunk.logprobs]}
        return {"content": chunk.text}
    assert chunk.finish_reason is not None and chunk.usage is not None
    return {"content": "", "finish_reason": chunk.finish_reason.value, "usage": chunk.usage.to_dict()}


def chunk_from_dict(data: dict[str, Any]) -> Chunk:
    """A chunk dict from `predict_stream` back as a `Chunk` (for timers and printers)."""
    reason = data.get("finish_reason")
    if reason is None:
        return Chunk(data["content"])
    usage = data["usage"]
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return Chunk("", FinishReason(reason), Usage(usage["prompt_tokens"], usage["completion_tokens"], cached))
