"""Function calling: OpenAI's `tools` and `tool_choice` for any model. Above the LLM, below the
server and the MLflow model: it decides what the chat template sees and which constraint the
answer gets, and splits the answer into text and calls in the model's own format."""

from llmflow.tools.formats import ToolCallFormat, format_for
from llmflow.tools.plan import ToolPlan, plan_tools
from llmflow.tools.spec import Tool, ToolChoice, parse_tool_choice, parse_tools
from llmflow.tools.stream import AnswerSplitter, ToolCallChunk, split_answer, tool_stream

__all__ = [
    "Tool",
    "ToolCallChunk",
    "ToolCallFormat",
    "ToolChoice",
    "ToolPlan",
    "AnswerSplitter",
    "format_for",
    "parse_tool_choice",
    "parse_tools",
    "plan_tools",
    "split_answer",
    "tool_stream",
]
