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


def parse_tools(raw: Any, field: str = "tools") -> tuple[Tool, ...]:
    """OpenAI's `tools` list (also as its JSON text): [{type: "function", function: {name,
    description?, parameters?}}]."""
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
    tools = [tool for i, item in enumerate(raw) if (tool := _tool(item, f"{field}[{i}]", problems))]
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        problems.append(FieldProblem(field, "function names must be unique"))
    if problems:
        raise InvalidRequest(problems)
    return tuple(tools)


def _tool(item: Any, where: str, problems: list[FieldProblem]) -> Tool | None:
    if not isinstance(item, Mapping) or item.get("type", "function") != "function":
        problems.append(FieldProblem(f"{where}.type", "only function tools are supported"))
        return None
    function = item.get("function")
    if not isinstance(function, Mapping):
        problems.append(FieldProblem(f"{where}.function", "must be an object with a name"))
        return None
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        problems.append(FieldProblem(f"{where}.function.name", "must be 1-64 letters, digits, _ or -"))
        return None
    description = function.get("description") or ""
    parameters = function.get("parameters", EMPTY_PARAMETERS)
    if not isinstance(description, str):
        problems.append(FieldProblem(f"{where}.function.description", "must be a string"))
    if not isinstance(parameters, Mapping):
        problems.append(FieldProblem(f"{where}.function.parameters", "must be a JSON Schema object"))
        return None
    return Tool(name, description, parameters, f"{where}.function.parameters")


def parse_tool_choice(raw: Any, tools: Sequence[Tool], field: str = "tool_choice") -> ToolChoice:
    """`none`, `auto`, `required`, or {type: "function", function: {name}} (also as JSON text);
    absent: `auto` with tools, `none` without."""
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
    function = raw.get("function") if isinstance(raw, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str):
        raise InvalidRequest.single(
            field, 'a named choice is {"type": "function", "function": {"name": ...}}'
        )
    if name not in {t.name for t in tools}:
        raise InvalidRequest.single(f"{field}.function.name", f"{name!r} is not one of the tools")
    return ToolChoice("function", name)
