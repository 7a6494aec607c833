"""`predict` in two steps, so that whoever generates the rows runs the same checks and builds the
same answers: `prepare_predict` checks the input and params and prepares every row's request
before the first token; `PredictCall.answers` turns the rows' completions into `predict`'s
answers (strings, detail dicts, or struct records). The pyfunc model generates the rows in
process; the server's /invocations generates them in its own pipeline (`transport.start_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmflow.errors import InvalidParams, LlmflowError
from llmflow.mlflow.inputs import Options, as_mlflow_error, parse_each_row, parse_options, parse_rows
from llmflow.mlflow.output import detail_extras, prepare_call
from llmflow.mlflow.signature import RESULT_STRUCT, TIMINGS
from llmflow.mlflow.struct_result import error_record, struct_record
from llmflow.observability import RequestTimings
from llmflow.types import Completion

if TYPE_CHECKING:
    from llmflow.llm import LLM, PreparedRequest, PromptInput
    from llmflow.tools import ToolPlan


@dataclass(frozen=True)
class Row:
    """One input row, ready to generate: its prompt, prepared request and tool plan."""

    prompt: PromptInput
    request: PreparedRequest
    plan: ToolPlan | None


@dataclass(frozen=True)
class PredictCall:
    """A checked `predict` call: its options and its rows; with `result="struct"`, a row that
    cannot be answered is the error its record reports."""

    options: Options
    rows: list[Row | LlmflowError]

    @property
    def generated(self) -> list[Row]:
        """The rows to generate, in order."""
        return [row for row in self.rows if isinstance(row, Row)]

    @property
    def struct(self) -> bool:
        return self.options.result == RESULT_STRUCT

    def answers(self, results: Iterable[tuple[Completion, RequestTimings | None]]) -> list[Any]:
        """One answer per row; `results` are the completions of `generated`, in order, each with
        its timings when the call asked for them."""
        done = iter(results)
        return [
            error_record(row) if isinstance(row, LlmflowError) else self._answer(row, *next(done))
            for row in self.rows
        ]

    def _answer(self, row: Row, completion: Completion, timings: RequestTimings | None) -> Any:
        options = self.options
        if self.struct:
            return struct_record(completion, options)
        if not options.details:
            return completion.text
        answer = {**completion_to_dict(completion), **detail_extras(completion, options, row.plan)}
        if options.timings and timings is not None:
            answer["timings"] = timings.to_dict()
        return answer


def prepare_predict(llm: LLM, model_input: Any, params: dict[str, Any] | None) -> PredictCall:
    """Bad input raises `InvalidModelInput` before any token; with `result="struct"` (Spark's
    batches) a bad row becomes an error record instead of failing the call."""
    with as_mlflow_error():
        options = parse_options(params, llm.default_params)
        if options.result == RESULT_STRUCT:
            return PredictCall(
                options, [_row_or_error(llm, row, options) for row in parse_each_row(model_input)]
            )
        rows: list[Row | LlmflowError] = [
            Row(row, *prepare_call(llm, row, options)) for row in parse_rows(model_input)
        ]
        if options.timings and not options.details:
            raise InvalidParams.single(TIMINGS, "needs details=true in predict (answers are strings)")
    return PredictCall(options, rows)


def _row_or_error(llm: LLM, row: PromptInput | LlmflowError, options: Options) -> Row | LlmflowError:
    if isinstance(row, LlmflowError):
        return row
    try:
        return Row(row, *prepare_call(llm, row, options))
    except LlmflowError as exc:  # bad messages, a prompt too long for the context window
        return exc


def completion_to_dict(completion: Completion) -> dict[str, Any]:
    answer = {
        "content": completion.text,
        "finish_reason": completion.finish_reason.value,
        "usage": completion.usage.to_dict(),
    }
    if completion.logprobs:  # asked for with the `logprobs` param
        answer["logprobs"] = [t.to_dict() for t in completion.logprobs]
    return answer
