"""Structured output in the pyfunc model: a call's constraint and tools applied to its request,
and what its answers carry for them (`parsed` JSON in `predict` details, `tool_calls` in details
and in the final stream chunk). Stream chunks stay `{"content": ...}`: calls are not content."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from llmflow.mlflow.inputs import Options
from llmflow.tools import ToolPlan, plan_tools, split_answer
from llmflow.types import Completion, FinishReason, Message

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest, PromptInput


def prepare_call(llm: LLM, row: PromptInput, options: Options) -> tuple[PreparedRequest, ToolPlan | None]:
    """The prepared request with the call's constraint; with tools, the plan its answer is read by."""
    output = options.output
    if not output.tools or output.tool_choice.mode == "none":
        request = llm.prepare(
            row, options.sampling, system_prompt=options.system_prompt, constraint=output.constraint
        )
        return request, None
    messages = [Message("user", row)] if isinstance(row, str) else list(row)  # type: ignore[arg-type]
    plan = plan_tools(
        llm.prompt_format, messages, output.tools, output.tool_choice, control_token=llm.control_token
    )
    plan.check(llm.compile)
    request = llm.prepare(
        plan.messages,
        options.sampling,
        system_prompt=options.system_prompt,
        constraint=plan.constraint,
        tools=plan.template_tools,
    )
    return request, plan


def detail_extras(completion: Completion, options: Options, plan: ToolPlan | None) -> dict[str, Any]:
    """`parsed` (a finished JSON answer as an object) and `tool_calls` for a `predict` detail dict."""
    if plan is not None:
        content, calls = split_answer(completion.text, plan.format)
        if not calls:
            return {}
        reason = (
            "tool_calls" if completion.finish_reason is FinishReason.STOP else completion.finish_reason.value
        )
        return {"content": content, "finish_reason": reason, "tool_calls": [c.to_openai() for c in calls]}
    constraint = options.output.constraint
    if constraint is None or not constraint.is_json or completion.finish_reason is not FinishReason.STOP:
        return {}
    return {"parsed": json.loads(completion.text)}
