"""From a Responses API request to what `LLM.prepare` takes: the conversation and the params.

The same rules read OpenAI's `POST /v1/responses` body and an MLflow `ResponsesAgentRequest`
(as a dict), so both accept and refuse the same things, naming the field at fault:

- `input`: a string (one user message) or a list of items; `instructions` become the system
  message in front (also in `params`, for a ResponsesAgent: MLflow's request model drops them).
- `max_output_tokens`, `temperature`, `top_p`; any other llmflow sampling param by its name in
  `params` (an ResponsesAgent's `custom_inputs`, llmflow extensions on the HTTP route).
- `previous_response_id` and `store: true` are refused here (a ResponsesAgent keeps no
  responses); the server's `/v1/responses` takes them out first, resolving a stored conversation
  into the `earlier` items it passes (`llmflow.server.response_store`).
- Function calling: `tools` (the Responses API's flat function tools; also in `params` as
  `tools`, for a ResponsesAgent loaded as a pyfunc model), `tool_choice`,
  `parallel_tool_calls`; `function_call` items become an assistant message's calls and
  `function_call_output` items tool messages, as chat completions have them, so `llmflow.tools`
  plans them as it plans a chat request's.
- `text.format`: `json_schema` and `json_object` constrain the answer, as chat's
  `response_format` does.
- A user message's `input_image` parts (`image_url`: a data URI or an `http(s)` URL) become its
  images, read by `llmflow.media` (the server, before it prepares the request).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmflow.constraints import Constraint
from llmflow.errors import FieldProblem, InvalidParams, InvalidRequest
from llmflow.media.refs import image_ref
from llmflow.params import PARAM_NAMES, SamplingParams
from llmflow.prompts import PromptFormat
from llmflow.tools import Tool, ToolChoice, ToolPlan, parse_tool_choice, parse_tools, plan_tools
from llmflow.tools.formats import ControlTokens, no_control_tokens
from llmflow.types import ContentPart, Message, ToolCall

#: message roles of the Responses API, as llmflow's chat roles
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: content part types whose text is read
TEXT_PARTS = ("input_text", "output_text", "text")
#: Responses fields that map onto llmflow's sampling params
SAMPLING_FIELDS = {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p"}
NO_TOOLS = ToolChoice("none")


@dataclass(frozen=True, slots=True)
class ResponsesInput:
    """A Responses request read: the conversation, sampling params by llmflow's names, the
    functions the model may call and the constraint `text.format` puts on a text answer."""

    messages: list[Message]
    params: dict[str, Any] = field(default_factory=dict)
    #: llmflow param name -> the request field it came from (for error messages)
    fields: dict[str, str] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS
    parallel_tool_calls: bool = True
    #: `text.format` as a constraint (None: plain text)
    output: Constraint | None = None

    def plan(self, prompt_format: PromptFormat, control_token: ControlTokens = no_control_tokens) -> ToolPlan:
        """What the tools do to this request (as for a chat request): the messages the
        template sees, the tools it renders, the constraint on calls, the format calls are read in."""
        return plan_tools(
            prompt_format,
            self.messages,
            self.tools,
            self.tool_choice,
            self.parallel_tool_calls,
            control_token=control_token,
        )

    def constraint(self, plan: ToolPlan) -> Constraint | None:
        """The answer's one constraint: `text.format`'s, or the tool plan's."""
        if self.output is not None and plan.constraint is not None:
            raise InvalidRequest.single(
                "text.format", "cannot be combined with tools unless tool_choice is none"
            )
        return self.output or plan.constraint

    def sampling(self, defaults: SamplingParams) -> SamplingParams:
        """`defaults` with this request's params on top; a bad value is named by its request field."""
        try:
            return defaults.merged(self.params)
        except InvalidParams as exc:
            renamed = [FieldProblem(self.fields.get(p.field, p.field), p.message) for p in exc.problems]
            raise InvalidParams(renamed) from None


def read_request(
    body: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    params_field: str = "params",
    earlier: Sequence[Mapping[str, Any]] = (),
) -> ResponsesInput:
    """Read `body`; `params` are extra llmflow sampling params (named as `params_field`.<name>);
    `earlier`: the conversation's items before this input (a stored response's input and
    output, when the server resolved `previous_response_id`)."""
    _refuse_unsupported(body)
    messages = read_input(body.get("input"), earlier)
    params, instructions, instructions_field = _field_or_param(
        body, params or {}, params_field, "instructions"
    )
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest.single(instructions_field, "must be a string")
        messages.insert(0, Message("system", instructions))
    params, raw_tools, tools_field = _field_or_param(body, params, params_field, "tools")
    values, fields = _sampling(body, params, params_field)
    tools = parse_tools(raw_tools, tools_field, flat=True) if raw_tools else ()
    choice = parse_tool_choice(body.get("tool_choice"), tools, flat=True)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequest.single("parallel_tool_calls", "must be true or false")
    output = read_text_format(body.get("text"))
    return ResponsesInput(messages, values, fields, tools, choice, parallel is not False, output)


def _field_or_param(
    body: Mapping[str, Any], params: Mapping[str, Any], params_field: str, name: str
) -> tuple[Mapping[str, Any], Any, str]:
    """The request's field `name`, or `name` among its params (a ResponsesAgent's
    `custom_inputs`), with the field to name in errors and the params without it. A loaded
    ResponsesAgent needs the second place: MLflow's pyfunc signature lets a function tool through
    with nothing but its `type`, and MLflow's request model has no `instructions` at all."""
    if not isinstance(params, Mapping) or name not in params:
        return params, body.get(name), name
    field = f"{params_field}.{name}" if params_field else name
    if body.get(name):
        raise InvalidRequest.single(field, f"give {name} once: in the request's {name} or here")
    rest = {key: value for key, value in params.items() if key != name}
    return rest, params[name], field


def read_text_format(text: Any) -> Constraint | None:
    """`text.format`: `text` (or absent), `json_object`, or `json_schema` with its `schema`."""
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise InvalidRequest.single("text", "must be an object ({format: ...})")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint.json_object("text.format")
    if kind != "json_schema":
        raise InvalidRequest.single("text.format.type", "must be text, json_object or json_schema")
    if fmt.get("schema") is None:
        raise InvalidRequest.single("text.format.schema", "json_schema needs a schema")
    return Constraint.json_schema(fmt["schema"], "text.format.schema")


def read_input(value: Any, earlier: Sequence[Mapping[str, Any]] = ()) -> list[Message]:
    """The conversation: the `earlier` items (a stored conversation, read as `previous_response_id`),
    then `input`."""
    messages = _read_items(earlier, "previous_response_id")
    if isinstance(value, str):
        if not value.strip():
            raise InvalidRequest.single("input", "the input is empty")
        return [*messages, Message("user", value)]
    if not isinstance(value, Sequence) or isinstance(value, bytes) or not value:
        raise InvalidRequest.single("input", "must be a string or a non-empty list of input items")
    return _read_items(value, "input", messages)


def _read_items(items: Sequence[Any], field: str, messages: list[Message] | None = None) -> list[Message]:
    messages = [] if messages is None else messages
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidRequest.single(where, "must be an input item object")
        kind = item.get("type") or "message"
        reader = ITEM_READERS.get(kind)
        if reader is None:
            raise InvalidRequest.single(
                f"{where}.type",
                f"unknown input item type {kind!r}; give messages ({{role, content}}), "
                "function_call or function_call_output items",
            )
        _append(messages, reader(item, where))
    return messages


def _append(messages: list[Message], message: Message) -> None:
    """Calls that follow an assistant message (or other calls) join it: one assistant turn, as a
    chat conversation has it, whatever the number of its `function_call` items."""
    last = messages[-1] if messages else None
    if message.tool_calls and not message.content and last is not None and last.role == "assistant":
        messages[-1] = Message("assistant", last.content, last.tool_calls + message.tool_calls)
    else:
        messages.append(message)


def _message(item: Mapping[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ROLES:
        raise InvalidRequest.single(f"{where}.role", f"must be one of {', '.join(ROLES)}; got {role!r}")
    content, where = item.get("content"), f"{where}.content"
    if role != "user" or isinstance(content, str):
        return Message(ROLES[role], _text(content, where))
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        raise InvalidRequest.single(where, "must be a string or a list of content parts")
    parts = [_part(part, f"{where}[{index}]") for index, part in enumerate(content)]
    return Message.of_parts("user", parts)


def _part(part: Any, where: str) -> ContentPart:
    """A user message's part: text, or an `input_image` (by `image_url`: a data URI or a URL)."""
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind in TEXT_PARTS and isinstance(part.get("text"), str):
        return str(part["text"])
    if kind == "input_image":
        if part.get("file_id") is not None:
            raise InvalidRequest.single(f"{where}.file_id", "files are not supported: give image_url")
        return image_ref(part.get("image_url"), where)
    raise InvalidRequest.single(
        where, f"must be a text part ({', '.join(TEXT_PARTS)}) or an input_image; got {kind!r}"
    )


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


def _function_call(item: Mapping[str, Any], where: str) -> Message:
    """A call the model made earlier: an assistant message with that call."""
    problems = [
        FieldProblem(f"{where}.{name}", "must be a string")
        for name in ("call_id", "name", "arguments")
        if not isinstance(item.get(name), str)
    ]
    if problems:
        raise InvalidRequest(problems)
    return Message("assistant", "", (ToolCall(item["call_id"], item["name"], item["arguments"]),))


def _function_call_output(item: Mapping[str, Any], where: str) -> Message:
    """A call's result: a tool message answering `call_id`."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest.single(f"{where}.call_id", "must be the call_id of the call it answers")
    return Message("tool", _text(item.get("output"), f"{where}.output"), tool_call_id=call_id)


#: input item type -> reader
ITEM_READERS: dict[str, Callable[[Mapping[str, Any], str], Message]] = {
    "message": _message,
    "function_call": _function_call,
    "function_call_output": _function_call_output,
}


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
