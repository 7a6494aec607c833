"""`predict(..., params={"result": "struct"})`: one flat record per row, and bad rows as values.

This is the shape Spark's struct result type takes from `mlflow.pyfunc.spark_udf`
(`result_type=SPARK_RESULT_TYPE`): answer, finish reason and token counts side by side, so a
job can filter, count and sum them in SQL. A row the model cannot answer (an empty prompt, no
`prompt` and no `messages`, bad messages, a prompt longer than the context window) gets an
error record instead of failing the whole batch, which in Spark would fail the job:
`finish_reason` is `"error"`, `error` says what to fix, `answer` is empty and the token counts
are 0. Good rows have an empty `error`.

Empty strings and zeros rather than nulls: MLflow's `spark_udf` casts each struct field with
numpy, which turns a null in a string field into the text "nan" or "None" and fails on a null in
an integer field, so nulls cannot be carried through it reliably.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmflow.errors import LlmflowError
from llmflow.types import Completion, FinishReason

if TYPE_CHECKING:
    from llmflow.mlflow.inputs import Options

#: the fields of a struct record, in order
RESULT_FIELDS = ("answer", "finish_reason", "prompt_tokens", "completion_tokens", "error")
#: Spark's type for them (a DDL string `spark_udf` accepts as `result_type`)
SPARK_RESULT_TYPE = (
    "answer string, finish_reason string, prompt_tokens int, completion_tokens int, error string"
)
#: the finish reason of a row that could not be answered
FINISH_ERROR = "error"


def struct_record(completion: Completion, options: Options) -> dict[str, Any]:
    """The record of a generated row; a JSON answer cut at max_tokens is an error record."""
    constraint = options.output.constraint
    if constraint is not None and constraint.is_json and completion.finish_reason is not FinishReason.STOP:
        return error_record(AnswerCut(completion.usage.completion_tokens))
    return {
        "answer": completion.text,
        "finish_reason": completion.finish_reason.value,
        "prompt_tokens": completion.usage.prompt_tokens,
        "completion_tokens": completion.usage.completion_tokens,
        "error": "",
    }


class AnswerCut(LlmflowError):
    """A JSON answer that ended at max_tokens before it closed: never half-parsed."""

    code = "answer_cut"

    def __init__(self, tokens: int):
        super().__init__(
            f"the answer ended at max_tokens ({tokens}) before its JSON closed; raise max_tokens"
        )


def error_record(error: LlmflowError) -> dict[str, Any]:
    return {
        "answer": "",
        "finish_reason": FINISH_ERROR,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "error": str(error),
    }
