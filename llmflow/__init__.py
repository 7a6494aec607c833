"""llmflow: a local LLM as an MLflow model that streams.

Importing llmflow is cheap: engines, MLflow and the server load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmflow.errors import LlmflowError
from llmflow.params import SamplingParams
from llmflow.types import CancelToken, Chunk, Completion, FinishReason, Message, Usage

__version__ = "0.1.0"

if TYPE_CHECKING:
    from llmflow.llm import LLM


def __getattr__(name: str) -> Any:
    if name == "LLM":  # pulls in prompts (jinja2) and the engine registry
        from llmflow.llm import LLM

        return LLM
    raise AttributeError(f"module 'llmflow' has no attribute {name!r}")


__all__ = [
    "LLM",
    "CancelToken",
    "Chunk",
    "Completion",
    "FinishReason",
    "LlmflowError",
    "Message",
    "SamplingParams",
    "Usage",
    "__version__",
]
