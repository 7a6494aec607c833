"""From chat messages to prompt text: the model's own template, a seed-style prompt map, or raw.

Chat templates come from model files and are untrusted: they render in Jinja2's immutable
sandbox, and every failure becomes a `ChatTemplateError` that says what went wrong.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from llmflow.errors import ChatTemplateError, FieldProblem, InvalidMessages, InvalidRequest
from llmflow.media.refs import image_ref
from llmflow.types import ContentPart, Message, TemplateText, ToolCall

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
MAX_MESSAGES = 1024
#: bounds on what a template may compute (a chat template is untrusted input)
MAX_TEMPLATE_ITEMS = 1_000_000
MAX_TEMPLATE_POWER = 64
#: message texts no template writes itself (Unicode's private use area), to find where a
#: template puts them
_STAND_INS = ("\ue000", "\ue001", "\ue002")


def parse_messages(raw: Any, field_name: str = "messages") -> list[Message]:
    """Validate `[{role, content}, ...]` (content may be OpenAI text parts); name each bad field."""
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise InvalidMessages.single(field_name, "must be a list of {role, content} objects")
    if not raw:
        raise InvalidMessages.single(field_name, "must hold at least one message")
    if len(raw) > MAX_MESSAGES:
        raise InvalidMessages.single(field_name, f"at most {MAX_MESSAGES} messages are allowed")
    messages: list[Message] = []
    problems: list[FieldProblem] = []
    for index, item in enumerate(raw):
        where = f"{field_name}[{index}]"
        if isinstance(item, Message):
            messages.append(item)
            continue
        if not isinstance(item, Mapping):
            problems.append(FieldProblem(where, "must be an object with role and content"))
            continue
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            problems.append(
                FieldProblem(f"{where}.role", f"must be one of {', '.join(sorted(ROLES))}; got {role!r}")
            )
        calls = _tool_calls(item.get("tool_calls"), where, problems) if role == "assistant" else ()
        raw_content = item.get("content")
        read = (
            Message(role, "")
            if raw_content is None and calls
            else _content(raw_content, role, where, problems)
        )
        call_id = item.get("tool_call_id")
        if role == "tool" and not (isinstance(call_id, str) and call_id):
            problems.append(FieldProblem(f"{where}.tool_call_id", "a tool message needs the id of its call"))
        if not problems and read is not None:
            messages.append(
                Message(role, read.content, calls, call_id if role == "tool" else None, read.parts)
            )
    if problems:
        raise InvalidMessages(problems)
    return messages


def _tool_calls(raw: Any, where: str, problems: list[FieldProblem]) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls`, OpenAI's shape: [{id, type, function: {name, arguments}}]."""
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        problems.append(FieldProblem(f"{where}.tool_calls", "must be a list of tool calls"))
        return ()
    calls = []
    for i, call in enumerate(raw):
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        arguments = function.get("arguments", "{}") if isinstance(function, Mapping) else None
        call_id = call.get("id", f"call_{i}") if isinstance(call, Mapping) else None
        if not isinstance(name, str) or not isinstance(arguments, str) or not isinstance(call_id, str):
            problems.append(
                FieldProblem(
                    f"{where}.tool_calls[{i}]",
                    "must be {id, type: 'function', function: {name, arguments (a JSON string)}}",
                )
            )
            continue
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def _content(content: Any, role: Any, where: str, problems: list[FieldProblem]) -> Message | None:
    """A message's content: a string, or OpenAI's parts (`text`; `image_url` in a user
    message, its image read later by `llmflow.media`)."""
    if isinstance(content, str):
        return Message(str(role), content)
    if not isinstance(content, Sequence) or isinstance(content, bytes):
        problems.append(FieldProblem(f"{where}.content", "must be a string or a list of content parts"))
        return None
    parts: list[ContentPart] = []
    for index, part in enumerate(content):
        place = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "image_url" and role == "user":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            try:
                parts.append(image_ref(url, place))
            except InvalidRequest as exc:
                problems.extend(exc.problems)
        elif kind == "image_url":
            problems.append(FieldProblem(place, "only a user message may hold images"))
        else:
            problems.append(
                FieldProblem(
                    place, f"must be a text part or (in a user message) an image_url part; got {kind!r}"
                )
            )
    return Message.of_parts(str(role), parts)


def with_system_prompt(messages: list[Message], system_prompt: str | None) -> list[Message]:
    """Prepend `system_prompt` unless the conversation already has a system message."""
    if not system_prompt or any(m.role == "system" for m in messages):
        return messages
    return [Message("system", system_prompt), *messages]


class PromptFormat(Protocol):
    """Renders a conversation into the text the model continues."""

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """`tools`: OpenAI function tools, for a template that renders them (`ChatTemplate`)."""
        ...


class _TemplateRaised(Exception):
    """`raise_exception(...)` called by a chat template: it rejects the conversation."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _sandbox() -> Any:
    """Jinja2's immutable sandbox, made strict: touching an unsafe attribute fails at once
    instead of rendering as an empty string."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class StrictSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            """No huge values from a template: `'x' * 10**9` or `9 ** 9 ** 9` would take the
            server's memory or CPU (Jinja's sandbox already bounds `range`)."""
            if operator == "**" and isinstance(right, int) and abs(right) > MAX_TEMPLATE_POWER:
                raise SecurityError(f"exponents above {MAX_TEMPLATE_POWER} are not allowed")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if (
                        isinstance(seq, (str, list, tuple))
                        and isinstance(n, int)
                        and len(seq) * n > MAX_TEMPLATE_ITEMS
                    ):
                        raise SecurityError(
                            f"a repeated value above {MAX_TEMPLATE_ITEMS} items is not allowed"
                        )
            return super().call_binop(context, operator, left, right)

        def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
            raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} is not allowed")

    env = StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja2 chat template as shipped in GGUF metadata or `tokenizer_config.json`."""

    source: str
    bos_token: str = ""
    eos_token: str = ""

    @cached_property
    def _template(self) -> Any:
        from jinja2 import TemplateError

        try:
            return _sandbox().from_string(self.source)
        except TemplateError as exc:
            raise ChatTemplateError(f"the chat template does not parse: {exc}") from None

    def validate(self) -> None:
        """Compile now, so a broken template fails at load time rather than at the first request."""
        _ = self._template

    @cached_property
    def renders_tools(self) -> bool:
        """The template itself writes the tools into the prompt (it reads Hugging Face's `tools`
        variable)."""
        from jinja2 import TemplateError, meta

        try:
            return "tools" in meta.find_undeclared_variables(_sandbox().parse(self.source))
        except TemplateError:
            return False

    @cached_property
    def turn_boundary(self) -> str:
        """What the template writes between an answer's text and the next user message's text
        (in ChatML `<|im_end|>`, a newline, `<|im_start|>user` and a newline): the part of a
        conversation's next prompt known before the user says anything. Empty when the template
        shows no such plain boundary (it fails on the probe, or does not write each text once, in
        order)."""
        user, answer, next_user = _STAND_INS
        probe = [Message("user", user), Message("assistant", answer), Message("user", next_user)]
        try:
            text = self.render(probe)
        except (ChatTemplateError, InvalidMessages):
            return ""
        if any(text.count(mark) != 1 for mark in _STAND_INS):
            return ""
        start, end = text.index(answer) + len(answer), text.index(next_user)
        return text[start:end] if start <= end else ""

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """`tools`: OpenAI function tools, as Hugging Face's `tools` variable; `variables`: more
        names the template may read (`reasoning_effort`, `enable_thinking`)."""
        from jinja2 import TemplateError
        from jinja2.sandbox import SecurityError

        extra = {"tools": list(tools)} if tools else {}
        try:
            return self._template.render(
                **(variables or {}),
                messages=[_template_message(m) for m in messages],
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except _TemplateRaised as exc:
            raise InvalidMessages.single("messages", f"rejected by the chat template: {exc}") from None
        except SecurityError as exc:
            raise ChatTemplateError(f"the chat template tried something unsafe: {exc}") from None
        except (TemplateError, ArithmeticError, TypeError, ValueError, AttributeError, LookupError) as exc:
            raise ChatTemplateError(f"the chat template failed to render: {exc}") from None


def prompt_format_of(own: TemplateText, chat_template: str | None = None) -> PromptFormat:
    """The renderer for a model: `chat_template` when given, else the template of its own files,
    with its special tokens either way; raw prompts when there is no template at all."""
    source = chat_template if chat_template is not None else own.source
    if not source:
        return RawPrompt()
    template = ChatTemplate(source, bos_token=own.bos_token, eos_token=own.eos_token)
    template.validate()
    return template


def _template_message(message: Message) -> dict[str, Any]:
    """A message as Hugging Face chat templates read it: calls with their arguments as an object."""
    out: dict[str, Any] = {"role": message.role, "content": _template_content(message)}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments_object(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def _template_content(message: Message) -> str | list[dict[str, str]]:
    """Text, or (a message with images) Hugging Face's parts: `{"type": "image"}` where each
    image goes, which a vision model's template turns into its image tokens."""
    if not message.parts:
        return message.content
    return [{"type": "text", "text": p} if isinstance(p, str) else {"type": "image"} for p in message.parts]


def _arguments_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


@dataclass(frozen=True)
class PromptMap:
    """The seed's format: one `str.format` template per role between a pre- and post-prompt.

    Roles missing from the map are left out, as in the seed.
    """

    prompt_map: Mapping[str, str]
    pre_prompt: str = ""
    post_prompt: str = ""

    def __post_init__(self) -> None:
        for role, template in self.prompt_map.items():
            if "{}" not in template and "{content}" not in template:
                raise ChatTemplateError(
                    f"prompt_map[{role!r}] must contain '{{}}' or '{{content}}' where the message goes"
                )

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        parts = [self.pre_prompt]
        for message in messages:
            template = self.prompt_map.get(message.role)
            if template is not None:
                parts.append(template.replace("{content}", "{}").replace("{}", message.content, 1))
        parts.append(self.post_prompt)
        return "".join(parts)


@dataclass(frozen=True)
class RawPrompt:
    """No template: the messages' contents joined, for plain completion models."""

    separator: str = "\n"

    def render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.separator.join(m.content for m in messages)
