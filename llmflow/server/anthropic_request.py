"""From an Anthropic Messages request to what a chat request is: the conversation as llmflow
`Message`s, the sampling params, and the tools, planned by `llmflow.tools` as a chat request's
(`tool_choice` auto / any / tool / none are its auto / required / a named function / none).

- `system` (a string or text blocks) becomes the system message in front.
- A user message's `text` and `image` blocks (a base64 or url source) become a user message,
  its `tool_result` blocks tool messages
  answering the `tool_use` they name (one the conversation holds, else a 400), in their order;
  a result with `is_error` reads "Error: ..." to the model.
- An assistant message's `text` blocks and `tool_use` blocks become one assistant message with
  its calls; `thinking` and `redacted_thinking` blocks are dropped (the model thinks anew).
- An assistant message last does not prefill the answer: the answer is a new assistant turn.

Every bad field is named as Anthropic names fields (`messages.1.content.0.tool_use_id`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from llmflow.errors import FieldProblem, InvalidParams, InvalidRequest
from llmflow.llm import LLM
from llmflow.media.refs import base64_ref, image_ref
from llmflow.params import SamplingParams
from llmflow.prompts import MAX_MESSAGES
from llmflow.server.anthropic_schemas import (
    Base64Source,
    CountTokensRequest,
    ImageBlock,
    InputMessage,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from llmflow.tools import Tool, ToolPlan, parse_tool_choice, parse_tools, plan_tools
from llmflow.tools import ToolChoice as LlmflowToolChoice
from llmflow.types import ContentPart, ImageRef, Message, ToolCall

#: content blocks a message of each role may hold, by type
BLOCKS: Mapping[str, Mapping[str, type[BaseModel]]] = {
    "user": {"text": TextBlock, "image": ImageBlock, "tool_result": ToolResultBlock},
    "assistant": {
        "text": TextBlock,
        "tool_use": ToolUseBlock,
        "thinking": ThinkingBlock,
        "redacted_thinking": RedactedThinkingBlock,
    },
}
#: content blocks in one message at most (a conversation holds at most `MAX_MESSAGES` messages)
MAX_BLOCKS = 1024
#: Anthropic's tool_choice -> OpenAI's (the Responses API's flat shape), as `llmflow.tools` reads it
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
#: llmflow param name -> the request field it came from, where they differ
_PARAM_FIELDS = {"stop": "stop_sequences"}
#: what joins text blocks that together make one message
_JOIN = "\n\n"
NO_TOOLS = LlmflowToolChoice("none")


@dataclass(frozen=True, slots=True)
class MessagesInput:
    """A Messages request read: the conversation, sampling params by llmflow's names, the tools
    the model may call and how, and the chat template's variables (`thinking`)."""

    messages: list[Message]
    params: dict[str, Any]
    tools: tuple[Tool, ...] = ()
    tool_choice: LlmflowToolChoice = NO_TOOLS
    parallel: bool = True
    template_vars: dict[str, Any] | None = None

    def plan(self, llm: LLM) -> ToolPlan:
        """What the tools do to this request, as to a chat request's."""
        return plan_tools(
            llm.prompt_format,
            self.messages,
            self.tools,
            self.tool_choice,
            self.parallel,
            control_token=llm.control_token,
        )

    def sampling(self, defaults: SamplingParams) -> SamplingParams:
        """`defaults` with this request's params on top; a bad value named by its request field."""
        try:
            return defaults.merged(self.params)
        except InvalidParams as exc:
            renamed = [FieldProblem(_PARAM_FIELDS.get(p.field, p.field), p.message) for p in exc.problems]
            raise InvalidParams(renamed) from None


def read_request(body: MessagesRequest | CountTokensRequest) -> MessagesInput:
    """Read `body` (already checked field by field by its pydantic model)."""
    messages = read_conversation(body.system, body.messages)
    tools = read_tools(body.tools) if body.tools else ()
    choice, parallel = read_tool_choice(body.tool_choice, tools)
    thinking = body.thinking
    variables = None if thinking is None else {"enable_thinking": thinking.type != "disabled"}
    params = _params(body) if isinstance(body, MessagesRequest) else {}
    return MessagesInput(messages, params, tools, choice, parallel, variables)


def count_tokens(llm: LLM, read: MessagesInput) -> int:
    """The prompt's tokens, rendered as a generation renders it (tools and their instructions
    included)."""
    plan = read.plan(llm)
    text = llm.render(plan.messages, tools=plan.template_tools, template_vars=read.template_vars)
    return len(llm.tokenize(text, add_special=True))


def _params(body: MessagesRequest) -> dict[str, Any]:
    values = {
        "max_tokens": body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "stop": tuple(body.stop_sequences) if body.stop_sequences is not None else None,
    }
    return {name: value for name, value in values.items() if value is not None}


# -- the conversation -------------------------------------------------------------------------------
def read_conversation(
    system: str | list[dict[str, Any]] | None, messages: Sequence[InputMessage]
) -> list[Message]:
    if len(messages) > MAX_MESSAGES:
        raise InvalidRequest.single("messages", f"at most {MAX_MESSAGES} messages are allowed")
    out: list[Message] = []
    if system is not None:
        text = _text(system, "system")
        if text:
            out.append(Message("system", text))
    calls: set[str] = set()  # the ids of the calls made so far
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        blocks = _blocks(message.content, message.role, f"{where}.content")
        if message.role == "assistant":
            out.extend(_assistant(blocks, calls))
        else:
            out.extend(_user(blocks, calls, f"{where}.content"))
    return out


def _blocks(content: str | list[dict[str, Any]], role: str, where: str) -> list[BaseModel]:
    """A message's content as checked blocks (a string is one text block)."""
    if isinstance(content, str):
        return [TextBlock(type="text", text=content)]
    if len(content) > MAX_BLOCKS:
        raise InvalidRequest.single(where, f"at most {MAX_BLOCKS} content blocks are allowed in a message")
    allowed = BLOCKS[role]
    return [_block(block, allowed, f"{where}.{i}", role) for i, block in enumerate(content)]


def _block(
    raw: Mapping[str, Any], allowed: Mapping[str, type[BaseModel]], where: str, role: str
) -> BaseModel:
    kind = raw.get("type")
    model = allowed.get(kind) if isinstance(kind, str) else None
    if model is None:
        kinds = ", ".join(allowed)
        raise InvalidRequest.single(f"{where}.type", f"a {role} message's blocks are {kinds}; got {kind!r}")
    return checked(model, raw, where)


def checked(model: type[BaseModel], raw: Any, where: str) -> Any:
    """`raw` as `model`, each problem named by its place under `where`."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidRequest(problems_of(exc, where)) from None


def problems_of(exc: ValidationError, where: str) -> list[FieldProblem]:
    problems = []
    for error in exc.errors():
        field = ".".join([where, *(str(part) for part in error["loc"])])
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(FieldProblem(field, message))
    return problems


def _assistant(blocks: list[BaseModel], calls: set[str]) -> list[Message]:
    """Text and calls as one assistant message; thinking dropped."""
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    uses = [b for b in blocks if isinstance(b, ToolUseBlock)]
    calls.update(use.id for use in uses)
    made = tuple(ToolCall(u.id, u.name, json.dumps(u.input, ensure_ascii=False)) for u in uses)
    text = _JOIN.join(texts)
    return [Message("assistant", text, made)] if text or made else []


def _user(blocks: list[BaseModel], calls: set[str], where: str) -> list[Message]:
    """Text and images as user messages, tool results as tool messages, in their order."""
    out: list[Message] = []
    parts: list[ContentPart] = []
    for index, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            parts.append(block.text)
            continue
        if isinstance(block, ImageBlock):
            parts.append(_image(block, f"{where}.{index}"))
            continue
        assert isinstance(block, ToolResultBlock)
        if block.tool_use_id not in calls:
            raise InvalidRequest.single(
                f"{where}.{index}.tool_use_id",
                f"{block.tool_use_id!r} answers no tool_use block of an earlier assistant message",
            )
        if parts:
            out.append(Message.of_parts("user", parts, _JOIN))
            parts = []
        result = "" if block.content is None else _text(block.content, f"{where}.{index}.content")
        result = f"Error: {result}" if block.is_error else result
        out.append(Message("tool", result, tool_call_id=block.tool_use_id))
    if parts:
        out.append(Message.of_parts("user", parts, _JOIN))
    return out


def _image(block: ImageBlock, where: str) -> ImageRef:
    """An image block's source (its media type is not trusted: the bytes say what they are)."""
    source = block.source
    if isinstance(source, Base64Source):
        return base64_ref(source.data, where)
    return image_ref(source.url, where)


def _text(content: str | list[dict[str, Any]], where: str) -> str:
    """A system prompt's or a tool result's text: a string, or text blocks joined."""
    if isinstance(content, str):
        return content
    if len(content) > MAX_BLOCKS:
        raise InvalidRequest.single(where, f"at most {MAX_BLOCKS} content blocks are allowed")
    texts = []
    for index, raw in enumerate(content):
        if raw.get("type") != "text":
            raise InvalidRequest.single(
                f"{where}.{index}.type", f"only text blocks are supported here; got {raw.get('type')!r}"
            )
        texts.append(checked(TextBlock, raw, f"{where}.{index}").text)
    return _JOIN.join(texts)


# -- tools ------------------------------------------------------------------------------------------
def read_tools(raw: Sequence[Mapping[str, Any]]) -> tuple[Tool, ...]:
    """Custom tools ({name, description, input_schema}) as `llmflow.tools` reads function tools."""
    functions = []
    for index, item in enumerate(raw):
        where = f"tools.{index}"
        if item.get("type") not in (None, "custom"):
            kind = item.get("type")
            raise InvalidRequest.single(
                f"{where}.type",
                f"only custom tools ({{name, description, input_schema}}) are supported; got {kind!r}",
            )
        tool = checked(ToolDefinition, item, where)
        function = {"type": "function", "name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            function["description"] = tool.description
        functions.append(function)
    tools = _renaming(lambda: parse_tools(functions, "tools", flat=True))
    return tuple(dataclasses.replace(t, field=_anthropic_field(t.field)) for t in tools)


def read_tool_choice(choice: ToolChoice | None, tools: Sequence[Tool]) -> tuple[LlmflowToolChoice, bool]:
    """The tool choice as `llmflow.tools` has it, and whether several calls are allowed."""
    if choice is None:
        return _renaming(lambda: parse_tool_choice(None, tools)), True
    if choice.type in ("any", "tool") and not tools:
        raise InvalidRequest.single("tool_choice.type", f"{choice.type!r} needs tools")
    if choice.type == "tool" and choice.name is None:
        raise InvalidRequest.single("tool_choice.name", "a tool choice of type tool names the tool")
    if choice.type != "tool" and choice.name is not None:
        raise InvalidRequest.single("tool_choice.name", "only a tool choice of type tool names a tool")
    raw = {"type": "function", "name": choice.name} if choice.type == "tool" else _CHOICES[choice.type]
    parsed = _renaming(lambda: parse_tool_choice(raw, tools, "tool_choice", flat=True))
    return parsed, not choice.disable_parallel_tool_use


def _renaming(read: Callable[[], Any]) -> Any:
    """`read()`, its refusals naming fields as this request has them."""
    try:
        return read()
    except InvalidRequest as exc:
        raise InvalidRequest(
            [FieldProblem(_anthropic_field(p.field), p.message) for p in exc.problems]
        ) from None


def _anthropic_field(field: str) -> str:
    """`tools[0].parameters` (a function tool's field) as `tools.0.input_schema`."""
    return re.sub(r"\[(\d+)\]", r".\1", field).replace(".parameters", ".input_schema")
