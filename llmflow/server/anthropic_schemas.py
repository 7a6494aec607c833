"""Anthropic Messages API request bodies, as pydantic models: `POST /v1/messages` and
`/v1/messages/count_tokens`. Unknown fields are refused by name, as Anthropic's API refuses them.

Content blocks, system blocks and tools are checked one at a time by the request reader
(`anthropic_request`), each against its own model here, so that a bad block is named by where it
is (`messages.2.content.0.tool_use_id`) rather than by every member of a union it failed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

from llmflow.server.schemas import ClosedModel


def _one_problem(message: str) -> WrapValidator:
    """A union field whose failure is one problem (`message`), not one per member of the union."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid_content", message) from None

    return WrapValidator(validate)


#: a message's content, a system prompt, a tool result's content: a string or a list of blocks
Content = Annotated[
    str | list[dict[str, Any]], _one_problem("must be a string or a list of content blocks (objects)")
]


class InputMessage(ClosedModel):
    role: Literal["user", "assistant"]
    content: Content = Field(description="a string, or a list of content blocks")


class Metadata(ClosedModel):
    user_id: str | None = Field(None, description="accepted and ignored")


class ToolChoice(ClosedModel):
    type: Literal["auto", "any", "tool", "none"] = Field(
        description="auto (default with tools), any (at least one call), tool (the tool `name`), none"
    )
    name: str | None = Field(None, description="with type tool: the tool to call")
    disable_parallel_tool_use: bool | None = Field(None, description="true: at most one call")


class ThinkingConfig(ClosedModel):
    type: Literal["enabled", "disabled", "adaptive"] = Field(
        description="handed to the chat template as `enable_thinking` (false for disabled)"
    )
    budget_tokens: int | None = Field(None, ge=1, description="accepted; not enforced")
    display: Literal["summarized", "omitted"] | None = Field(None, description="accepted and ignored")


class _Conversation(ClosedModel):
    """What both routes read: the conversation, the system prompt, the tools."""

    model: str = Field(description="the served model's name, as listed by GET /v1/models")
    messages: list[InputMessage] = Field(min_length=1)
    system: Content | None = Field(None, description="a string, or a list of text blocks")
    tools: list[dict[str, Any]] | None = Field(
        None, description="custom tools: {name, description, input_schema}"
    )
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    cache_control: dict[str, Any] | None = Field(None, description="accepted and ignored")


class MessagesRequest(_Conversation):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1, description="tokens to generate at most (required)")
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, description="0 = greedy")
    top_p: float | None = None
    top_k: int | None = None
    metadata: Metadata | None = Field(None, description="accepted and ignored")
    service_tier: str | None = Field(None, description="accepted and ignored")
    inference_geo: str | None = Field(None, description="accepted and ignored")
    speed: str | None = Field(None, description="accepted and ignored")


class CountTokensRequest(_Conversation):
    """`POST /v1/messages/count_tokens`."""


# -- one content block, tool, or tool result part at a time (read by `anthropic_request`) --------
class TextBlock(ClosedModel):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class Base64Source(ClosedModel):
    type: Literal["base64"]
    media_type: str = Field(description="accepted; the image's format is read from its bytes")
    data: str = Field(description="the image's bytes in base64")


class UrlSource(ClosedModel):
    type: Literal["url"]
    url: str = Field(description="an http(s) URL, fetched only when the server allows its host")


class ImageBlock(ClosedModel):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(ClosedModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    caller: dict[str, Any] | None = None


class ToolResultBlock(ClosedModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Content | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(ClosedModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(ClosedModel):
    type: Literal["redacted_thinking"]
    data: str


class ToolDefinition(ClosedModel):
    type: Literal["custom"] | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    strict: bool | None = Field(None, description="accepted; a forced call always follows the schema")
