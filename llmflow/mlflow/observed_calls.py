"""Traces and timings of the pyfunc model's calls (see `llmflow.observability`).

`predict_stream`: one trace per call, its span ended when the stream ends, however it ends.
`predict`: one trace per call, a root span `llmflow.predict` (outputs: the answers) with one
child span `llmflow.generate` per input row. Each row is timed on its own: a row's `ttft_ms` is
from the start of that row, not of the call. `result="struct"` (Spark batches) is not traced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmflow.llm import collect
from llmflow.load_spec import params_to_config
from llmflow.observability import ObservedGeneration, ObservedStream, RequestTimings, RequestTrace
from llmflow.observability.trace import SPAN_TYPE_CHAT, SPAN_TYPE_LLM
from llmflow.types import CancelToken, Completion, Message

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest, PromptInput
    from llmflow.mlflow.inputs import Options
    from llmflow.mlflow.predict_call import Row

STREAM_SPAN = "llmflow.predict_stream"
PREDICT_SPAN = "llmflow.predict"
ROW_SPAN = "llmflow.generate"


def observed_stream(
    llm: LLM,
    request: PreparedRequest,
    timings: RequestTimings,
    trace: RequestTrace | None,
    cancel: CancelToken | None = None,
) -> ObservedStream:
    """The generation of `request`, timed into `timings` and traced into `trace` (when given)."""
    timings.prompt_tokens = len(request.prompt_ids)
    cancel = cancel or CancelToken()
    return ObservedStream(llm.stream_prepared(request, cancel), cancel, ObservedGeneration(timings, trace))


def start_trace(
    name: str, llm: LLM, row: PromptInput, options: Options, started: float, parent: Any = None
) -> RequestTrace:
    """The span of one generation, started at `started` (a perf_counter reading)."""
    span_type = SPAN_TYPE_LLM if isinstance(row, str) else SPAN_TYPE_CHAT
    inputs = {**row_inputs(row), "params": params_inputs(options)}
    return RequestTrace(name, inputs, attributes=model_attributes(llm), span_type=span_type).begin(
        started, parent
    )


def predict_observed(
    llm: LLM,
    rows: list[Row],
    options: Options,
    *,
    trace: bool,
    started: float,
) -> list[tuple[Completion, RequestTimings | None]]:
    """Every row's completion with its timings, under one trace when `trace`."""
    root = None
    if trace:
        inputs = {"inputs": [row_inputs(row.prompt) for row in rows], "params": params_inputs(options)}
        root = RequestTrace(PREDICT_SPAN, inputs, attributes=model_attributes(llm), span_type="CHAIN")
        root.begin(started)
    results: list[tuple[Completion, RequestTimings | None]] = []
    try:
        for row in rows:
            timings = RequestTimings()
            timings.admit()  # rows run one after the other: a row's clock starts with it
            child = None
            if root is not None and root.span is not None:
                child = start_trace(ROW_SPAN, llm, row.prompt, options, timings.arrived, parent=root.span)
            results.append((collect(observed_stream(llm, row.request, timings, child)), timings))
    except BaseException as exc:
        if root is not None:
            root.end(error=exc)
        raise
    if root is not None:
        root.set_result([completion.text for completion, _ in results])
        root.end()
    return results


def row_inputs(row: PromptInput) -> dict[str, Any]:
    if isinstance(row, str):
        return {"prompt": row}
    return {"messages": [_message(m) for m in row]}


def params_inputs(options: Options) -> dict[str, Any]:
    params = params_to_config(options.sampling)
    if options.system_prompt is not None:
        params["system_prompt"] = options.system_prompt
    return params


def model_attributes(llm: LLM) -> dict[str, Any]:
    return {"llmflow.engine": llm.engine.name, "llmflow.model": llm.model_name}


def _message(message: Any) -> dict[str, Any]:
    if isinstance(message, Message):
        recorded: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.images:  # how many, not their bytes
            recorded["images"] = len(message.images)
        return recorded
    return dict(message)
