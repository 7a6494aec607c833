"""What tools do to one chat request: the messages and tools the template sees, the constraint
on the answer (`required` and a named function force valid calls; `auto` constrains the answer
from the moment the model opens a call, in every format) and the format the answer's calls are
read in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llmflow.constraints import Constraint
from llmflow.prompts import PromptFormat
from llmflow.tools.formats import ControlTokens, ToolCallFormat, format_for, no_control_tokens
from llmflow.tools.spec import Tool, ToolChoice
from llmflow.types import Message


@dataclass(frozen=True)
class ToolPlan:
    format: ToolCallFormat
    messages: list[Message]
    #: OpenAI tool objects for a template that renders them; None otherwise
    template_tools: list[dict[str, Any]] | None
    constraint: Constraint | None
    #: the model may call functions: its answer is read for calls
    active: bool
    tools: tuple[Tool, ...] = ()

    def check(self, compile: Callable[[Constraint], Any]) -> None:
        """Compile each offered tool's parameters on its own first, so that a schema the
        constraint library refuses is an error naming that tool (`tools[i].function.parameters`)."""
        for tool in self.tools:
            compile(Constraint.json_schema(dict(tool.parameters), tool.field))


def plan_tools(
    prompt_format: PromptFormat,
    messages: Sequence[Message],
    tools: Sequence[Tool],
    choice: ToolChoice,
    parallel: bool = True,
    field: str = "tools",
    control_token: ControlTokens = no_control_tokens,
) -> ToolPlan:
    """`control_token`: the model's control token spelled like a format's call marker, if any
    (`LLM.control_token`), so that `auto` lets the model open its calls with it."""
    fmt = format_for(prompt_format)
    history = list(messages) if fmt.template_renders_tools else fmt.rewrite(messages)
    if choice.mode == "none" or not tools:
        return ToolPlan(fmt, history, None, None, False)
    offered = tuple(t for t in tools if choice.mode != "function" or t.name == choice.name)
    if choice.mode == "auto":
        constraint = fmt.auto_constraint(offered, parallel, field, control_token)
    else:
        constraint = fmt.calls_constraint(offered, parallel and choice.mode == "required", field)
    if fmt.template_renders_tools:
        return ToolPlan(fmt, history, [t.to_openai() for t in offered], constraint, True, offered)
    instructions = fmt.system_prompt(offered, parallel)
    return ToolPlan(fmt, _with_instructions(history, instructions), None, constraint, True, offered)


def _with_instructions(messages: list[Message], instructions: str | None) -> list[Message]:
    """The tool instructions appended to the system message (or as one, first)."""
    if not instructions:
        return messages
    if messages and messages[0].role == "system":
        first = messages[0]
        return [Message("system", f"{first.content}\n\n{instructions}"), *messages[1:]]
    return [Message("system", instructions), *messages]
