"""An llmflow model as an MLflow `ResponsesAgent` (`log_model(..., interface="responses")`).

MLflow 3's standard interface for agents and chat models: `predict(ResponsesAgentRequest)` returns
a `ResponsesAgentResponse` (one assistant message item, `usage`, `status`), and `predict_stream`
yields `ResponsesAgentStreamEvent`s in the order OpenAI's Responses API streams them
(`response.created` ... `response.output_text.delta` with its `item_id` ...
`response.output_item.done`, `response.completed` with usage; `response.incomplete` when
`max_output_tokens` cut the answer). The events are built by `llmflow.responses.events`, the
same builder `llmflow serve` uses for `/v1/responses`, `/responses` and this model's
`/invocations`, so the wire format is one.

Sampling: `max_output_tokens`, `temperature`, `top_p` from the request; any llmflow sampling
param (`top_k`, `stop`, `seed`, ...) from `custom_inputs`. Function calling and structured output
from the request's own fields, which MLflow's `ResponsesAgentRequest` carries: `tools` (flat
function tools), `tool_choice`, `parallel_tool_calls`, `function_call` / `function_call_output`
input items, `text.format`; calls come out as `function_call` output items. MLflow traces each
call itself (an AGENT span), as it does for every ResponsesAgent.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from mlflow.exceptions import MlflowException
from mlflow.pyfunc import ResponsesAgent
from mlflow.types.responses import ResponsesAgentRequest, ResponsesAgentResponse, ResponsesAgentStreamEvent

from llmflow.generation import Final
from llmflow.mlflow.inputs import as_mlflow_error
from llmflow.mlflow.model import llm_from_context
from llmflow.responses.request import read_request
from llmflow.responses.turn import PreparedResponse, prepare_response

if TYPE_CHECKING:
    from llmflow.llm import LLM

CUSTOM_INPUTS = "custom_inputs"
#: what the logged model shows as its example (short, so MLflow's check at logging time is quick)
INPUT_EXAMPLE: dict[str, Any] = {
    "input": [{"role": "user", "content": "What is MLflow?"}],
    "max_output_tokens": 16,
}


class LlmflowResponsesAgent(ResponsesAgent):
    """An `LLM` behind MLflow's ResponsesAgent interface; built from the MLmodel's `model_config`
    (models-from-code), or around a loaded LLM by `from_llm`."""

    def __init__(self) -> None:
        self.llm: LLM | None = None

    @classmethod
    def from_llm(cls, llm: LLM) -> LlmflowResponsesAgent:
        agent = cls()
        agent.llm = llm
        return agent

    def load_context(self, context: Any) -> None:
        self.llm, _ = llm_from_context(context)

    def predict(self, request: ResponsesAgentRequest) -> ResponsesAgentResponse:
        prepared = self.prepare(request)
        *_, final = self._loaded().start(prepared.generation)
        assert type(final) is Final
        return ResponsesAgentResponse(**prepared.answer(final.record))

    def predict_stream(
        self, request: ResponsesAgentRequest
    ) -> Generator[ResponsesAgentStreamEvent, None, None]:
        prepared = self.prepare(request)
        events = prepared.events
        for event in events.opening():
            yield ResponsesAgentStreamEvent(**event)
        generation = self._loaded().start(prepared.generation)
        try:
            for item in generation:
                body = events.closing(item.record) if type(item) is Final else events.events_of(item)
                for event in body:
                    yield ResponsesAgentStreamEvent(**event)
        finally:
            generation.close()

    def prepare(
        self, request: ResponsesAgentRequest | Mapping[str, Any], model: str | None = None
    ) -> PreparedResponse:
        """Check a request, plan its tools, compile its constraint and tokenize it, before any
        token; with the event builder of its answer (named `model`, else the LLM's name). The
        server starts its streams here too."""
        llm = self._loaded()
        body = request_dict(request)
        with as_mlflow_error():
            read = read_request(body, body.get(CUSTOM_INPUTS), CUSTOM_INPUTS)
            return prepare_response(llm, read, model or llm.model_name, body)

    def _loaded(self) -> LLM:
        if self.llm is None:
            raise MlflowException(
                "the llmflow ResponsesAgent has no LLM: load it with mlflow.pyfunc.load_model, or "
                "build it with LlmflowResponsesAgent.from_llm"
            )
        return self.llm


def request_dict(request: ResponsesAgentRequest | Mapping[str, Any]) -> dict[str, Any]:
    """A request as a plain dict, validated as a `ResponsesAgentRequest` (MLflow's own model).
    MLflow's model has no `instructions` and drops them without a word; a dict keeps them."""
    kept = {}
    if isinstance(request, Mapping):
        kept = {"instructions": request["instructions"]} if "instructions" in request else {}
        try:
            request = ResponsesAgentRequest(**request)
        except (ValueError, TypeError) as exc:
            raise MlflowException.invalid_parameter_value(f"invalid ResponsesAgent request: {exc}") from None
    return request.model_dump(exclude_none=True) | kept
