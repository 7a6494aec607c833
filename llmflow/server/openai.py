"""OpenAI-compatible routes: chat and text completions (streaming or not) and the model list.

Input is validated and tokenized before the response starts, so bad input is a 4xx JSON answer,
never a broken stream. Generation runs in a worker thread (see `running`).

llmflow extensions: `"timings": true` in a request adds a `timings` object (the numbers behind
/metrics) to the answer, or to the last chunk of a stream; with tracing on, each generation is
an MLflow trace whose span holds the request, the whole answer, usage and timings.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from llmflow.constraints import Constraint
from llmflow.errors import FieldProblem, InvalidParams, InvalidRequest, UnsupportedEndpoint, valid_unicode
from llmflow.generation import GenerationRequest
from llmflow.llm import LLM, PreparedRequest
from llmflow.observability import RequestTimings
from llmflow.observability.trace import SPAN_TYPE_CHAT, SPAN_TYPE_LLM
from llmflow.params import SamplingParams
from llmflow.prompts import parse_messages
from llmflow.server.model_registry import adapter_param, model_for
from llmflow.server.pipeline import observe
from llmflow.server.schemas import (
    SSE_DESCRIPTION,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    ModelCard,
    ModelList,
    TextCompletion,
    error_responses,
)
from llmflow.server.state import ModelState, ServerState, get_state
from llmflow.server.transport import serve, start
from llmflow.tools import ToolPlan, parse_tool_choice, parse_tools, plan_tools
from llmflow.types import Message
from llmflow.wire.openai import ChatEncoder, CompletionsEncoder, model_card, model_list

router = APIRouter(prefix="/v1", tags=["OpenAI"])

_GENERATION_ERRORS = error_responses(400, 401, 404, 413, 429, 503, 504)
_SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop",
    "seed",
    "lora",
    "lora_scale",
    "speculative",
)


def _stream_doc(model: type) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": model,
            "description": SSE_DESCRIPTION,
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **_GENERATION_ERRORS,
    }


@router.post("/chat/completions", response_model=None, responses=_stream_doc(ChatCompletion))
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    """Answer a conversation with the model's chat template; with `tools`, the answer may call
    functions (`message.tool_calls`, streamed as `delta.tool_calls`)."""
    timings = RequestTimings()
    state = await model_for(request, body.model)
    llm = llm_for(state)
    max_tokens = body.max_tokens if body.max_completion_tokens is None else body.max_completion_tokens
    params = _sampling_params(state, body, max_tokens=max_tokens)
    messages = parse_messages([_message_dict(message) for message in body.messages])
    messages = await get_state(request).images.read(messages)
    plan = _tool_plan(llm, body, messages)
    constraint = _one_constraint(_output_constraint(body), plan.constraint)
    effort = body.reasoning_effort
    variables = None if effort is None else {"reasoning_effort": effort, "enable_thinking": effort != "none"}
    prepared = await prepare(
        llm,
        plan.messages,
        params,
        raw=False,
        plan=plan,
        constraint=constraint,
        tools=plan.template_tools,
        reasoning_format=state.settings.reasoning_format,
        template_vars=variables,
    )
    return await _answer(state, request, llm, prepared, body, timings, chat=True, plan=plan)


@router.post("/completions", response_model=None, responses=_stream_doc(TextCompletion))
async def completions(body: CompletionRequest, request: Request) -> Response:
    """Continue a prompt as is (no chat template)."""
    timings = RequestTimings()
    state = await model_for(request, body.model)
    llm = llm_for(state)
    params = _sampling_params(state, body, max_tokens=body.max_tokens)
    constraint = _output_constraint(body)
    prepared = await prepare(llm, _single_prompt(body.prompt), params, raw=True, constraint=constraint)
    return await _answer(state, request, llm, prepared, body, timings, chat=False)


@router.get("/models", response_model=ModelList, responses=error_responses(401))
async def list_models(request: Request) -> JSONResponse:
    state = get_state(request)
    adapters = [
        f"{m.served.name}:{a}"
        for m in state.models.loaded()
        if m.served.llm
        for a in m.served.llm.engine.lora_names
    ]
    modalities = _modalities(state)
    modalities.update({name: modalities[name.split(":")[0]] for name in adapters})
    return JSONResponse(model_list([*state.models.names, *adapters], state.created, modalities))


@router.get("/models/{model}", response_model=ModelCard, responses=error_responses(401, 404))
async def get_model(model: str, request: Request) -> JSONResponse:
    state = get_state(request)
    name = state.models.slot(model).name  # a model not served: 404 (it is not loaded for this)
    return JSONResponse(model_card(name, state.created, _modalities(state).get(name)))


def _modalities(state: ServerState) -> dict[str, tuple[str, ...]]:
    """What each loaded model reads (a model not loaded yet cannot say)."""
    return {
        m.served.name: m.served.llm.engine.input_modalities for m in state.models.loaded() if m.served.llm
    }


# -- request checks -----------------------------------------------------------------------------
def llm_for(state: ModelState) -> LLM:
    """The LLM of the model a request named (see `models.model_for`)."""
    if state.served.llm is None:
        raise UnsupportedEndpoint(
            f"{state.served.name!r} is a plain MLflow pyfunc model: it is served at POST /invocations "
            '(with "stream": true to stream), not through the OpenAI routes'
        )
    return state.served.llm


def _sampling_params(
    state: ModelState, body: ChatCompletionRequest | CompletionRequest, max_tokens: int | None
) -> SamplingParams:
    llm = llm_for(state)
    problems = _unsupported_fields(body, state.settings.max_n)
    if problems:
        raise InvalidRequest(problems)
    values = {name: getattr(body, name) for name in _SAMPLING_FIELDS if getattr(body, name) is not None}
    values.update(adapter_param(state, body.model, body.lora))
    if max_tokens is not None:
        values["max_tokens"] = max_tokens
    values["logprobs"] = _logprobs(body)
    try:
        return llm.default_params.merged(values)
    except InvalidParams as exc:
        if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
            renamed = [FieldProblem(_rename(p.field), p.message) for p in exc.problems]
            raise InvalidParams(renamed) from None
        raise


def _logprobs(body: ChatCompletionRequest | CompletionRequest) -> int | None:
    """How many most likely tokens come with each token's logprob; None: no logprobs."""
    if isinstance(body, CompletionRequest):
        return body.logprobs
    return (body.top_logprobs or 0) if body.logprobs else None


def _rename(field: str) -> str:
    return "max_completion_tokens" if field == "max_tokens" else field


def _unsupported_fields(body: ChatCompletionRequest | CompletionRequest, max_n: int) -> list[FieldProblem]:
    problems = []
    if body.stream_options is not None and not body.stream:
        problems.append(FieldProblem("stream_options", "is only allowed when stream is true"))
    if body.n is not None and not 1 <= body.n <= max_n:
        problems.append(FieldProblem("n", f"must be from 1 to {max_n} (this server's limit)"))
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(body, name) not in (None, 0):
            problems.append(FieldProblem(name, "is not supported (only 0)"))
    if isinstance(body, ChatCompletionRequest) and body.top_logprobs is not None and not body.logprobs:
        problems.append(FieldProblem("top_logprobs", "needs logprobs: true"))
    if isinstance(body, CompletionRequest) and body.echo:
        problems.append(FieldProblem("echo", "is not supported"))
    return problems


def _message_dict(message: ChatMessage) -> dict[str, Any]:
    out = message.model_dump(include={"role", "content", "tool_call_id"}, exclude_none=True)
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    return out


def _output_constraint(body: ChatCompletionRequest | CompletionRequest) -> Constraint | None:
    """What the answer must be: `response_format`, or llmflow's `regex`, `choice`, `grammar`; at
    most one of them."""
    found: list[Constraint] = []
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        found.append(Constraint.json_object("response_format"))
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise InvalidRequest.single("response_format.json_schema.schema", "json_schema needs a schema")
        found.append(Constraint.json_schema(fmt.json_schema.schema_, "response_format.json_schema.schema"))
    if body.regex is not None:
        found.append(Constraint.regex(body.regex, "regex"))
    if body.choice is not None:
        found.append(Constraint.choice(body.choice, "choice"))
    if body.grammar is not None:
        found.append(Constraint.grammar(body.grammar, "grammar"))
    if len(found) > 1:
        names = ", ".join(c.field.split(".")[0] for c in found)
        raise InvalidRequest.single(found[1].field.split(".")[0], f"give one output constraint, not {names}")
    return found[0] if found else None


def _one_constraint(output: Constraint | None, tools: Constraint | None) -> Constraint | None:
    if output is not None and tools is not None:
        raise InvalidRequest.single(
            output.field.split(".")[0], "cannot be combined with tools unless tool_choice is none"
        )
    return output or tools


def _tool_plan(llm: LLM, body: ChatCompletionRequest, messages: list[Message]) -> ToolPlan:
    raw_tools = [tool.model_dump(exclude_none=True) for tool in body.tools or ()]
    tools = parse_tools(raw_tools) if raw_tools else ()
    choice = body.tool_choice
    raw_choice = choice.model_dump() if choice is not None and not isinstance(choice, str) else choice
    parsed = parse_tool_choice(raw_choice, tools)
    return plan_tools(
        llm.prompt_format,
        messages,
        tools,
        parsed,
        parallel=body.parallel_tool_calls is not False,
        control_token=llm.control_token,
    )


def _single_prompt(prompt: str | list[str]) -> str:
    if isinstance(prompt, str):
        return prompt
    if len(prompt) != 1:
        raise InvalidRequest.single("prompt", "give one prompt (a string, or a list of exactly one string)")
    return prompt[0]


#: a prompt of text this short, with no tools or output constraint, renders and tokenizes in a
#: fraction of a millisecond: less than the hop to a worker thread and back costs the request
INLINE_PROMPT_CHARS = 4096


async def prepare(
    llm: LLM, prompt: Any, params: SamplingParams, *, raw: bool, plan: ToolPlan | None = None, **options: Any
) -> PreparedRequest:
    """Check the tool plan, compile the constraint, render and tokenize, raising llmflow errors;
    in a thread (a long prompt, a large schema take a while) unless the work is small (`_small`).
    `options` are `LLM.prepare`'s (`constraint`, `tools`, `reasoning_format`, `template_vars`)."""

    def prepared() -> PreparedRequest:
        if plan is not None:
            plan.check(llm.compile)
        return llm.prepare(prompt, params, raw=raw, **options)

    with valid_unicode("prompt" if raw else "messages"):
        if _small(prompt, plan, options):
            return prepared()
        return await asyncio.to_thread(prepared)


def _small(prompt: str | list[Message], plan: ToolPlan | None, options: dict[str, Any]) -> bool:
    """Text alone, at most `INLINE_PROMPT_CHARS`, nothing to compile: work for the loop itself."""
    if options.get("constraint") is not None or options.get("tools") or (plan is not None and plan.tools):
        return False
    if isinstance(prompt, str):
        return len(prompt) <= INLINE_PROMPT_CHARS
    if any(message.parts for message in prompt):
        return False
    return sum(len(message.content) for message in prompt) <= INLINE_PROMPT_CHARS


# -- answering ----------------------------------------------------------------------------------
async def _answer(
    state: ModelState,
    request: Request,
    llm: LLM,
    prepared: PreparedRequest,
    body: ChatCompletionRequest | CompletionRequest,
    timings: RequestTimings,
    *,
    chat: bool,
    plan: ToolPlan | None = None,
) -> Response:
    name, span_type = (
        ("llmflow.chat_completions", SPAN_TYPE_CHAT) if chat else ("llmflow.completions", SPAN_TYPE_LLM)
    )
    observed = observe(state, timings, name, lambda: body.model_dump(exclude_unset=True), span_type=span_type)
    n = body.n or 1
    encoder = (ChatEncoder if chat else CompletionsEncoder)(
        model=state.served.name,
        n=n,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        with_timings=bool(body.timings),
        with_logprobs=prepared.params.logprobs is not None,
    )
    calls = plan.format if plan is not None and plan.active else None
    generation = await start(state, llm, GenerationRequest(prepared, n, calls), observed, request.receive)
    return await serve(generation, encoder, stream=bool(body.stream), receive=request.receive)
