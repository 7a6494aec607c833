"""One Responses request against an LLM: prepared before any token (its tools planned as a chat
request's are, its constraint compiled, its prompt tokenized), then its answer written by one
`ResponseEvents`, streamed or whole. The server's routes and the ResponsesAgent model both
answer through it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmflow.generation import GenerationRecord, GenerationRequest
from llmflow.llm import LLM, PreparedRequest
from llmflow.responses.events import ResponseEvents
from llmflow.responses.request import ResponsesInput
from llmflow.tools import ToolCallFormat


@dataclass(frozen=True)
class PreparedResponse:
    """A request ready to generate, the event builder of its answer, and the format the
    answer's calls are read in (None: the model may call no function; its answer is text)."""

    request: PreparedRequest
    events: ResponseEvents
    calls: ToolCallFormat | None = None

    @property
    def generation(self) -> GenerationRequest:
        """What to generate: the prompt, its answer read for calls when it may hold them."""
        return GenerationRequest(self.request, calls=self.calls)

    def answer(self, record: GenerationRecord) -> dict[str, Any]:
        """The whole response object of a generation's record."""
        return self.events.answer(record)


def prepare_response(
    llm: LLM, read: ResponsesInput, model: str, echo: Mapping[str, Any] | None = None
) -> PreparedResponse:
    """Plan the tools, compile the constraint and tokenize: every refusal (a tool's schema, the
    prompt's length) before any token. `echo`: the request fields the response repeats."""
    plan = read.plan(llm.prompt_format, llm.control_token)
    constraint = read.constraint(plan)
    plan.check(llm.compile)
    params = read.sampling(llm.default_params)
    request = llm.prepare(plan.messages, params, constraint=constraint, tools=plan.template_tools)
    calls = plan.format if plan.active else None
    used = {**(echo or {}), "temperature": params.temperature, "top_p": params.top_p}
    return PreparedResponse(request, ResponseEvents(model, used, calls=calls is not None), calls)
