"""Tools a request offers the model and how it may use them: OpenAI's `tools` and `tool_choice`,
validated into plain data. Each bad field is named, as for every other request field."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmflow.errors import FieldProblem, InvalidRequest

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128
EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """A function the model may call; `parameters` is the JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    #: where the request gave it, e.g. "tools[0]"
    field: str = "tools"

    def to_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


ChoiceMode = Literal["none", "auto", "required", "function"]


@dataclass(frozen=True)
class ToolChoice:
    """`none`: no calls; `auto`: the model decides; `required`: at least one call; `function`:
    exactly the function `name`."""

    mode: ChoiceMode
    name: str | None = None


def parse_tools(raw: Any, field: str = "tools", *, flat: bool = False) -> tuple[Tool, ...]:
    """OpenAI's `tools` list (also as its JSON text): [{type: "function", function: {name,
    description?, parameters?, strict?}}] as chat completions have it, or, `flat`, the Responses
    API's [{type: "function", name, description?, parameters?, strict?}]. `strict` is accepted
    either way: a call whose arguments llmflow constrains always validates."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidRequest.single(field, f"is not valid JSON: {exc}") from None
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise InvalidRequest.single(field, "must be a non-empty list of function tools")
    if len(raw) > MAX_TOOLS:
        raise InvalidRequest.single(field, f"at most {MAX_TOOLS} tools are allowed")
    problems: list[FieldProblem] = []
    tools = [tool for i, item in enumerate(raw) if (tool := _tool(item, f"{field}[{i}]", problems, flat))]
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        problems.append(FieldProblem(field, "function names must be unique"))
    if problems:
        raise InvalidRequest(problems)
    return tuple(tools)


def _tool(item: Any, where: str, problems: list[FieldProblem], flat: bool) -> Tool | None:
    if not isinstance(item, Mapping) or item.get("type", None if flat else "function") != "function":
        problems.append(FieldProblem(f"{where}.type", "only function tools are supported"))
        return None
    function, where = (item, where) if flat else (item.get("function"), f"{where}.function")
    if not isinstance(function, Mapping):
        problems.append(FieldProblem(where, "must be an object with a name"))
        return None
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        problems.append(FieldProblem(f"{where}.name", "must be 1-64 letters, digits, _ or -"))
        return None
    description = function.get("description") or ""
    parameters = function.get("parameters")
    parameters = EMPTY_PARAMETERS if parameters is None else parameters
    if not isinstance(description, str):
        problems.append(FieldProblem(f"{where}.description", "must be a string"))
    if function.get("strict") is not None and not isinstance(function.get("strict"), bool):
        problems.append(FieldProblem(f"{where}.strict", "must be true or false"))
    if not isinstance(parameters, Mapping):
        problems.append(FieldProblem(f"{where}.parameters", "must be a JSON Schema object"))
        return None
    return Tool(name, description, parameters, f"{where}.parameters")


def parse_tool_choice(
    raw: Any, tools: Sequence[Tool], field: str = "tool_choice", *, flat: bool = False
) -> ToolChoice:
    """`none`, `auto`, `required`, or a named function (also as JSON text): {type: "function",
    function: {name}} as chat completions name it, or, `flat`, the Responses API's {type:
    "function", name}; absent: `auto` with tools, `none` without."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(raw, str) and raw.lstrip().startswith("{"):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidRequest.single(field, f"is not valid JSON: {exc}") from None
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise InvalidRequest.single(field, "must be none, auto, required or a named function")
        if raw != "none" and not tools:
            raise InvalidRequest.single(field, f"{raw!r} needs tools")
        return ToolChoice(raw)  # type: ignore[arg-type]
    holder, where = (raw, field) if flat else (_get(raw, "function"), f"{field}.function")
    name = _get(holder, "name")
    if not isinstance(name, str) or _get(raw, "type") not in (None, "function"):
        shape = (
            '{"type": "function", "name": ...}' if flat else '{"type": "function", "function": {"name": ...}}'
        )
        raise InvalidRequest.single(field, f"a named choice is {shape}")
    if name not in {t.name for t in tools}:
        raise InvalidRequest.single(f"{where}.name", f"{name!r} is not one of the tools")
    return ToolChoice("function", name)


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None
