"""From a Responses API request to what `LLM.prepare` takes: the conversation and the params.

The same rules read OpenAI's `POST /v1/responses` body and an MLflow `ResponsesAgentRequest`
(as a dict), so both accept and refuse the same things, naming the field at fault:

- `input`: a string (one user message) or a list of items; `instructions` become the system
  message in front.
- `max_output_tokens`, `temperature`, `top_p`; any other llmflow sampling param by its name in
  `params` (an ResponsesAgent's `custom_inputs`, llmflow extensions on the HTTP route).
- llmflow keeps no responses: `previous_response_id` and `store: true` are refused.
- Tool calling is not built yet: `tools`, a `tool_choice` that asks for a tool, and
  `function_call` / `function_call_output` items are refused. They join here (`ITEM_READERS`,
  `_refuse_unsupported`) when it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmflow.errors import FieldProblem, InvalidParams, InvalidRequest
from llmflow.params import PARAM_NAMES, SamplingParams
from llmflow.types import Message

#: message roles of the Responses API, as llmflow's chat roles
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: content part types whose text is read
TEXT_PARTS = ("input_text", "output_text", "text")
#: Responses fields that map onto llmflow's sampling params
SAMPLING_FIELDS = {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p"}
_NO_TOOLS = "tool calling is not supported by this server yet"


@dataclass(frozen=True, slots=True)
class ResponsesInput:
    """A Responses request read: the conversation, and sampling params by llmflow's names."""

    messages: list[Message]
    params: dict[str, Any] = field(default_factory=dict)
    #: llmflow param name -> the request field it came from (for error messages)
    fields: dict[str, str] = field(default_factory=dict)

    def sampling(self, defaults: SamplingParams) -> SamplingParams:
        """`defaults` with this request's params on top; a bad value is named by its request field."""
        try:
            return defaults.merged(self.params)
        except InvalidParams as exc:
            renamed = [FieldProblem(self.fields.get(p.field, p.field), p.message) for p in exc.problems]
            raise InvalidParams(renamed) from None


def read_request(
    body: Mapping[str, Any], params: Mapping[str, Any] | None = None, params_field: str = "params"
) -> ResponsesInput:
    """Read `body`; `params` are extra llmflow sampling params (named as `params_field`.<name>)."""
    _refuse_unsupported(body)
    messages = read_input(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest.single("instructions", "must be a string")
        messages.insert(0, Message("system", instructions))
    values, fields = _sampling(body, params or {}, params_field)
    return ResponsesInput(messages, values, fields)


def read_input(value: Any) -> list[Message]:
    if isinstance(value, str):
        if not value.strip():
            raise InvalidRequest.single("input", "the input is empty")
        return [Message("user", value)]
    if not isinstance(value, Sequence) or isinstance(value, bytes) or not value:
        raise InvalidRequest.single("input", "must be a string or a non-empty list of input items")
    messages = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidRequest.single(where, "must be an input item object")
        kind = item.get("type") or "message"
        reader = ITEM_READERS.get(kind)
        if reader is None:
            raise InvalidRequest.single(f"{where}.type", _unknown_item(kind))
        messages.append(reader(item, where))
    return messages


def _message(item: Mapping[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ROLES:
        raise InvalidRequest.single(f"{where}.role", f"must be one of {', '.join(ROLES)}; got {role!r}")
    return Message(ROLES[role], _text(item.get("content"), f"{where}.content"))


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        raise InvalidRequest.single(where, "must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise InvalidRequest.single(
                f"{where}[{index}]", f"only text parts ({', '.join(TEXT_PARTS)}) are supported; got {kind!r}"
            )
        texts.append(part["text"])
    return "".join(texts)


#: input item type -> reader. Tool calling adds `function_call` and `function_call_output` here.
ITEM_READERS: dict[str, Callable[[Mapping[str, Any], str], Message]] = {"message": _message}


def _unknown_item(kind: Any) -> str:
    if kind in ("function_call", "function_call_output"):
        return f"{kind} items need tool calling: {_NO_TOOLS}"
    return f"unknown input item type {kind!r}; give messages ({{role, content}})"


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    problems = []
    if body.get("previous_response_id") is not None:
        problems.append(
            FieldProblem(
                "previous_response_id",
                "this server keeps no responses (store is false): send the whole conversation as input",
            )
        )
    if body.get("store"):
        problems.append(FieldProblem("store", "this server keeps no responses: leave store out, or false"))
    for name in ("conversation", "prompt"):
        if body.get(name) is not None:
            problems.append(FieldProblem(name, "this server keeps no conversations or prompts"))
    if body.get("top_logprobs"):
        problems.append(FieldProblem("top_logprobs", "logprobs are not supported"))
    if body.get("background"):
        problems.append(FieldProblem("background", "background responses are not supported"))
    if body.get("tools"):
        problems.append(FieldProblem("tools", _NO_TOOLS))
    if body.get("tool_choice") not in (None, "none", "auto"):
        problems.append(FieldProblem("tool_choice", _NO_TOOLS))
    text_format = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
    if isinstance(text_format, Mapping) and text_format.get("type") not in (None, "text"):
        problems.append(FieldProblem("text.format", "only plain text output is supported"))
    if problems:
        raise InvalidRequest(problems)


def _sampling(
    body: Mapping[str, Any], extra: Mapping[str, Any], extra_field: str
) -> tuple[dict[str, Any], dict[str, str]]:
    if not isinstance(extra, Mapping):
        raise InvalidParams.single(extra_field, "must be an object of llmflow sampling params")
    unknown = sorted(str(name) for name in extra if name not in PARAM_NAMES)
    if unknown:
        problems = [
            FieldProblem(f"{extra_field}.{name}", "not an llmflow sampling param") for name in unknown
        ]
        # (extra params without a field name come from a typed HTTP body: they are known already)
        raise InvalidParams(problems)
    values = {name: value for name, value in extra.items() if value is not None}
    fields = {name: f"{extra_field}.{name}" if extra_field else name for name in values}
    for name, param in SAMPLING_FIELDS.items():
        if body.get(name) is not None:
            values[param] = body[name]
            fields[param] = name
    return values, fields
