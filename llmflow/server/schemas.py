"""OpenAI request and response bodies, as pydantic models: they validate requests and they are what
the OpenAPI document shows. Responses are built as plain dicts on the hot path (see `llmflow.wire`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmflow.params import MAX_TOP_LOGPROBS


class ClosedModel(BaseModel):
    """A request body, or a part of one: unknown fields are refused (as OpenAI does)."""

    model_config = ConfigDict(extra="forbid")


class StreamOptions(ClosedModel):
    include_usage: bool = Field(False, description="send a last chunk with `choices: []` and `usage`")


class TextPart(ClosedModel):
    type: Literal["text"]
    text: str


class ImageUrl(ClosedModel):
    url: str = Field(
        description="a data URI (data:image/png;base64,...), or an http(s) URL the server allows"
    )
    detail: Literal["auto", "low", "high"] | None = Field(None, description="accepted and ignored")


class ImageUrlPart(ClosedModel):
    type: Literal["image_url"]
    image_url: ImageUrl


#: a part of a message's content (images in a user message only)
ContentPart = Annotated[TextPart | ImageUrlPart, Field(discriminator="type")]


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="the arguments as a JSON string")


class ToolCallItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    # Clients echo assistant messages back with fields llmflow does not use (refusal, annotations...).
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = Field(
        None,
        description="text, or text and image_url parts (a user message's images); may be null in an "
        "assistant message with tool_calls",
    )
    name: str | None = None
    tool_calls: list[ToolCallItem] | None = Field(None, description="an assistant message's function calls")
    tool_call_id: str | None = Field(None, description="a tool message: the id of the call it answers")


class JsonSchemaFormat(ClosedModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="the JSON Schema of the answer")
    strict: bool | None = Field(None, description="accepted; the answer always follows the schema")


class ResponseFormat(ClosedModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="with type json_schema")


class FunctionDefinition(ClosedModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON Schema of the arguments")
    strict: bool | None = Field(None, description="accepted; forced calls always follow the parameters")


class ToolDefinition(ClosedModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(ClosedModel):
    type: Literal["function"]
    function: dict[str, str] = Field(description='{"name": ...}')


class _GenerationRequest(ClosedModel):
    """Fields shared by chat and text completions. Unknown fields are rejected (as OpenAI does)."""

    model: str = Field(description="the served model's name, as listed by GET /v1/models")
    stream: bool = False
    stream_options: StreamOptions | None = Field(None, description="only with `stream: true`")
    max_tokens: int | None = Field(None, description="tokens to generate at most")
    temperature: float | None = Field(None, description="0 = greedy")
    top_p: float | None = None
    top_k: int | None = Field(None, description="llmflow extension; 0 = off")
    min_p: float | None = Field(None, description="llmflow extension; 0 = off")
    repetition_penalty: float | None = Field(None, description="llmflow extension; 1 = off")
    stop: str | list[str] | None = None
    seed: int | None = None
    lora: str | None = Field(
        None, description="llmflow extension: a loaded LoRA adapter's name (or send `model` as BASE:ADAPTER)"
    )
    lora_scale: float | None = Field(None, description="llmflow extension: the adapter's weight (default 1)")
    speculative: bool | None = Field(
        None,
        description="llmflow extension: false opts out of speculative decoding (prompt lookup), "
        "where the engine has it on; the answer is the same either way",
    )
    n: int | None = Field(1, description="answers to generate (up to the server's --max-n); usage counts all")
    frequency_penalty: float | None = Field(None, description="only 0 is supported")
    presence_penalty: float | None = Field(None, description="only 0 is supported")
    user: str | None = Field(None, description="accepted and ignored")
    timings: bool = Field(
        False,
        description="llmflow extension: add a `timings` object (queue_ms, ttft_ms, e2e_ms, token counts, "
        "decode_tokens_per_s) to the answer, or to the last chunk of a stream",
    )
    response_format: ResponseFormat | None = Field(
        None,
        description="text, json_object (any JSON object) or json_schema (the answer follows the schema; "
        "an unsupported schema is a 400 naming what is unsupported)",
    )
    regex: str | None = Field(
        None, description="llmflow extension: the answer matches this regular expression"
    )
    choice: list[str] | None = Field(
        None, description="llmflow extension: the answer is one of these strings"
    )
    grammar: str | None = Field(
        None,
        description="llmflow extension: the answer follows this grammar (Lark in llguidance's dialect, "
        "or GBNF)",
    )


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, description="tokens to generate at most")
    logprobs: bool | None = Field(
        None,
        description="each token's logprob, from the model's distribution before penalties, "
        "temperature and filters (vLLM's raw_logprobs)",
    )
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description="most likely tokens with each token (needs logprobs)"
    )
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = Field(
        None,
        description="for reasoning models: handed to the chat template as `reasoning_effort`, and as "
        '`enable_thinking` (false for "none"); templates that read neither ignore it',
    )
    tools: list[ToolDefinition] | None = Field(None, description="functions the model may call")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None,
        description="none, auto (default with tools), required, or a named function; required and "
        "a named function constrain decoding so that the arguments validate against the parameters",
    )
    parallel_tool_calls: bool | None = Field(
        None, description="allow several calls in one answer (default true)"
    )


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str] = Field(description="a string (a list must hold exactly one)")
    logprobs: int | None = Field(
        None,
        ge=0,
        le=MAX_TOP_LOGPROBS,
        description="each token's logprob with this many most likely tokens', from the model's "
        "distribution before penalties, temperature and filters (vLLM's raw_logprobs)",
    )
    echo: bool | None = Field(None, description="not supported; false or absent")


class ResponsesRequest(ClosedModel):
    """`POST /v1/responses`: OpenAI's Responses API, stateless. Every field OpenAI defines is
    known: those llmflow cannot honour are refused by name (`llmflow.responses.request`), the
    rest are accepted and ignored; unknown fields are refused."""

    model: str = Field(description="the served model's name, as listed by GET /v1/models")
    input: str | list[dict[str, Any]] = Field(description="a string, or a list of message items")
    instructions: str | None = Field(None, description="a system message put in front of the input")
    stream: bool = False
    max_output_tokens: int | None = Field(None, description="tokens to generate at most")
    temperature: float | None = Field(None, description="0 = greedy")
    top_p: float | None = None
    top_k: int | None = Field(None, description="llmflow extension; 0 = off")
    min_p: float | None = Field(None, description="llmflow extension; 0 = off")
    repetition_penalty: float | None = Field(None, description="llmflow extension; 1 = off")
    stop: str | list[str] | None = Field(None, description="llmflow extension")
    seed: int | None = Field(None, description="llmflow extension")
    lora: str | None = Field(
        None, description="llmflow extension: a loaded LoRA adapter's name (or send `model` as BASE:ADAPTER)"
    )
    lora_scale: float | None = Field(None, description="llmflow extension: the adapter's weight (default 1)")
    store: bool | None = Field(
        None,
        description="keep the response for previous_response_id and GET /v1/responses/{id} (default true)",
    )
    previous_response_id: str | None = Field(
        None, description="a kept response this one continues: its input and output come before `input`"
    )
    tools: list[dict[str, Any]] | None = Field(
        None,
        description='function tools: {"type": "function", "name", "description", "parameters", "strict"}',
    )
    tool_choice: str | dict[str, Any] | None = Field(
        None, description='none, auto, required, or {"type": "function", "name": ...}'
    )
    text: dict[str, Any] | None = Field(
        None, description='{"format": ...}: text, json_object, or json_schema ({"name", "schema", "strict"})'
    )
    background: bool | None = Field(None, description="false or absent")
    conversation: str | dict[str, Any] | None = Field(None, description="refused: no stored conversations")
    prompt: dict[str, Any] | None = Field(None, description="refused: no stored prompts")
    include: list[str] | None = Field(None, description="accepted and ignored")
    metadata: dict[str, str] | None = Field(None, description="accepted and ignored")
    parallel_tool_calls: bool | None = Field(None, description="false: at most one call (default true)")
    reasoning: dict[str, Any] | None = Field(None, description="accepted and ignored")
    truncation: Literal["auto", "disabled"] | None = Field(None, description="accepted and ignored")
    user: str | None = Field(None, description="accepted and ignored")
    safety_identifier: str | None = Field(None, description="accepted and ignored")
    prompt_cache_key: str | None = Field(None, description="accepted and ignored")
    service_tier: str | None = Field(None, description="accepted and ignored")
    max_tool_calls: int | None = Field(None, description="accepted and ignored")
    top_logprobs: int | None = Field(None, description="0 or absent")
    stream_options: dict[str, Any] | None = Field(None, description="accepted and ignored")


# -- responses (for the OpenAPI document) -----------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Timings(BaseModel):
    """llmflow extension, sent when the request has `timings: true`: the numbers behind /metrics."""

    queue_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    decode_tokens_per_s: float | None


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = Field(None, description="a reasoning model's thinking, when split")
    reasoning: str | None = Field(None, description="the same, under vLLM's name")
    tool_calls: list[ToolCallItem] | None = Field(None, description="when the model called functions")


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: dict[str, Any] | None = Field(None, description="with logprobs: {content: [...]}")


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings | None = Field(None, description="only when the request asked for timings")


class TextChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: dict[str, Any] | None = Field(
        None, description="with logprobs: {tokens, token_logprobs, top_logprobs, text_offset}"
    )


class TextCompletion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage
    timings: Timings | None = Field(None, description="only when the request asked for timings")


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    input_modalities: list[Literal["text", "image", "audio"]] | None = Field(
        None, description="llmflow: what the model reads (a model not loaded yet: absent)"
    )


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class MlflowErrorResponse(BaseModel):
    """What MLflow's scoring server answers when the model refuses its input (/invocations)."""

    error_code: str
    message: str


SSE_DESCRIPTION = (
    "With `stream: true`: `text/event-stream`, one `data: {chunk}` event per delta, then `data: [DONE]`. "
    'An error after streaming began is sent as `data: {"error": {...}}` followed by `data: [DONE]`.'
)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the error statuses a route can answer."""
    return {status: {"model": ErrorResponse} for status in statuses}
