"""From what `predict` and `predict_stream` receive to requests for the LLM.

Input comes from MLflow (after its schema enforcement: a DataFrame for `predict`, a dict for
`predict_stream`) or straight from a caller (a str, a dict, a list of those, a DataFrame). Every
shape is checked here, so bad input fails with a message that names the field, before any token.

`InvalidModelInput` is such a failure as MLflow sees it: an `MlflowException` that still carries
the llmflow error. MLflow's scoring server answers `INVALID_PARAMETER_VALUE` with HTTP 400;
llmflow's own server maps `.error` by its class, like any other llmflow error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from llmflow.constraints import Constraint
from llmflow.errors import FieldProblem, InvalidParams, InvalidRequest, LlmflowError
from llmflow.llm import PromptInput
from llmflow.media.values import image_input
from llmflow.mlflow.signature import (
    CHOICE,
    DETAILS,
    GRAMMAR,
    JSON_SCHEMA,
    OUTPUT_PARAMS,
    REGEX,
    RESULT,
    RESULT_STRUCT,
    RESULT_TEXT,
    STOP_SEQUENCES,
    SYSTEM_PROMPT,
    TIMINGS,
    TOOL_CHOICE,
    TOOLS,
    TRACE,
)
from llmflow.params import PARAM_NAMES, SamplingParams
from llmflow.prompts import parse_messages
from llmflow.tools import Tool, ToolChoice, parse_tool_choice, parse_tools
from llmflow.types import ImageRef, Message

IMAGES = "images"
INPUT_FIELDS = ("prompt", "messages", IMAGES)
_EXTRA_PARAMS = ("stop", STOP_SEQUENCES, SYSTEM_PROMPT, DETAILS, RESULT, TRACE, TIMINGS, *OUTPUT_PARAMS)
_RESULTS = (RESULT_TEXT, RESULT_STRUCT)
_HOW = "give a `prompt` string or a `messages` list of {role, content} (and optionally `images`)"


class InvalidModelInput(MlflowException):
    """A request the model refuses (bad input, params, messages, or a prompt too long)."""

    def __init__(self, error: LlmflowError):
        super().__init__(str(error), error_code=INVALID_PARAMETER_VALUE)
        self.error = error


@contextmanager
def as_mlflow_error() -> Iterator[None]:
    """llmflow's input errors as `MlflowException`s (HTTP 400 in MLflow's scoring server)."""
    try:
        yield
    except LlmflowError as exc:
        raise InvalidModelInput(exc) from exc


NO_TOOLS = ToolChoice("none")


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """What the answer must be: one constraint (`json_schema`, `regex`, `choice`, `grammar`), or
    functions it may call (`tools`, `tool_choice`)."""

    constraint: Constraint | None = None
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS


@dataclass(frozen=True, slots=True)
class Options:
    """The params of one call, validated."""

    sampling: SamplingParams
    system_prompt: str | None
    details: bool
    result: str = RESULT_TEXT
    #: None: the model's tracing setting decides (see `llmflow.observability.policy`)
    trace: bool | None = None
    timings: bool = False
    output: OutputRequest = OutputRequest()


def parse_rows(model_input: Any) -> list[PromptInput]:
    """One prompt or conversation per input row."""
    if isinstance(model_input, str):
        return [_prompt(model_input, "prompt")]
    if isinstance(model_input, Mapping):
        columns = column_rows(model_input)
        if columns is None:
            return [parse_row(model_input, "input")]
        model_input = columns
    rows = _expanded(_records(model_input))
    if not rows:
        raise InvalidRequest.single("input", f"there are no input rows: {_HOW}")
    where = "input" if len(rows) == 1 else "input[{}]"
    return [parse_row(row, where.format(i)) for i, row in enumerate(rows)]


def parse_each_row(model_input: Any) -> list[PromptInput | LlmflowError]:
    """Like `parse_rows`, but a bad row becomes its error instead of failing the whole call
    (`result="struct"`: one bad row in a Spark job must not fail the job)."""
    if isinstance(model_input, (str, Mapping)):
        rows = _expanded([model_input])
    else:
        rows = _expanded(_records(model_input))
        if not rows:
            raise InvalidRequest.single("input", f"there are no input rows: {_HOW}")
    parsed: list[PromptInput | LlmflowError] = []
    for row in rows:
        try:
            parsed.append(parse_row(row, "input"))
        except LlmflowError as exc:
            parsed.append(exc)
    return parsed


def parse_single(model_input: Any) -> PromptInput:
    """The one request of a stream (a list or DataFrame of exactly one row is accepted)."""
    rows = parse_rows(model_input)
    if len(rows) != 1:
        raise InvalidRequest.single("input", f"a stream answers one input, got {len(rows)} rows")
    return rows[0]


def column_rows(data: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The rows of a columnar input, None when `data` is one row.

    MLflow hands an `inputs` or `instances` body over as columns (`{"prompt": ["a", "b"]}`,
    after its schema check a one-row DataFrame whose cell holds the array): one row per element.
    A `prompt` column is a list (or array) of strings; a `messages` column a list of
    conversations, where a list of message objects is one conversation, not a column; an
    `images` column (beside one of those) holds each row's images. `images` alone is one row's."""
    columns = {name: _as_list(value) for name, value in data.items() if _is_column(name, value)}
    if not columns or set(columns) == {IMAGES}:
        return None
    if len(columns) != len(data):
        others = sorted(str(k) for k, v in data.items() if k not in columns and _present(v) is not None)
        if others:
            raise InvalidRequest.single(f"input.{others[0]}", "must be a column like the others (a list)")
    lengths = {name: len(value) for name, value in columns.items()}
    if len(set(lengths.values())) != 1:
        raise InvalidRequest.single("input", f"the columns have different lengths: {lengths}")
    count = next(iter(lengths.values()))
    return [{name: value[index] for name, value in columns.items()} for index in range(count)]


def _is_column(name: Any, value: Any) -> bool:
    if name not in INPUT_FIELDS or isinstance(value, (str, bytes, Mapping)):
        return False
    if getattr(value, "ndim", None) == 0:  # a numpy scalar: one value
        return False
    value = _as_list(value)
    if not isinstance(value, Sequence):
        return False
    if name in ("prompt", IMAGES):
        return True
    return bool(value) and not any(isinstance(item, Mapping) for item in value)


def parse_row(row: Any, where: str) -> PromptInput:
    if isinstance(row, str):
        return _prompt(row, where)
    if not isinstance(row, Mapping):
        raise InvalidRequest.single(where, f"must be an object or a string; {_HOW}")
    unknown = sorted(str(k) for k in row if k not in INPUT_FIELDS)
    if unknown:
        raise InvalidRequest.single(
            f"{where}.{unknown[0]}",
            f"unknown input field; {_HOW} (sampling settings such as max_tokens go in params)",
        )
    prompt, messages, images = (_present(row.get(name)) for name in INPUT_FIELDS)
    if prompt is not None and messages is not None:
        raise InvalidRequest.single(where, "give either `prompt` or `messages`, not both")
    if prompt is not None:
        parsed: PromptInput = _prompt(prompt, f"{where}.prompt")
    elif messages is not None:
        parsed = parse_messages(_as_list(messages), f"{where}.messages")
    else:
        raise InvalidRequest.single(where, f"there is no `prompt` and no `messages`: {_HOW}")
    return parsed if images is None else with_images(parsed, images, f"{where}.{IMAGES}")


def with_images(prompt: PromptInput, images: Any, where: str) -> PromptInput:
    """`prompt` with `images` (a list, or one image) before the text of its last user message:
    a prompt string becomes one user message of the images and the prompt. The images are not
    read here: `LLM.prepare` refuses them for a model that reads none, else reads them."""
    items = _as_list(bytes(images) if isinstance(images, memoryview) else images)
    if isinstance(items, (str, bytes, bytearray)):
        items = [items]  # one image given without a list around it
    if not isinstance(items, Sequence):
        raise InvalidRequest.single(where, f"must be a list of images, not {type(items).__name__}")
    refs = [image_input(item, f"{where}[{index}]") for index, item in enumerate(items)]
    if not refs:
        return prompt
    if isinstance(prompt, str):
        return [Message.of_parts("user", [*refs, prompt])]
    messages = parse_messages(prompt)
    users = [index for index, message in enumerate(messages) if message.role == "user"]
    if not users:
        raise InvalidRequest.single(where, "the messages hold no user message to attach the images to")
    return [_with_refs(m, refs) if i == users[-1] else m for i, m in enumerate(messages)]


def _with_refs(message: Message, refs: list[ImageRef]) -> Message:
    parts = message.parts or ((message.content,) if message.content else ())
    return dataclasses.replace(message, parts=(*refs, *parts))


def parse_options(params: Any, defaults: SamplingParams) -> Options:
    """Sampling params on top of `defaults`, plus `system_prompt` and `details`.

    `stop` (a string or a list) and `stop_sequences` (a list) both apply; a missing
    `stop_sequences` means the model's default stops, as MLflow fills it in."""
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise InvalidParams.single("params", "must be an object of parameter names to values")
    unknown = sorted(str(k) for k in params if k not in PARAM_NAMES and k not in _EXTRA_PARAMS)
    if unknown:
        raise InvalidParams([FieldProblem(name, "unknown parameter") for name in unknown])
    overrides = {k: v for k, v in params.items() if k in PARAM_NAMES and k != "stop" and v is not None}
    stop = params.get("stop")
    sequences = params.get(STOP_SEQUENCES)
    if stop is not None or sequences is not None:
        extra = list(defaults.stop) if sequences is None else _stop_list(sequences, STOP_SEQUENCES)
        overrides["stop"] = _stop_list(stop, "stop") + extra
    return Options(
        sampling=defaults.merged(overrides),
        system_prompt=_optional_str(params.get(SYSTEM_PROMPT), SYSTEM_PROMPT),
        details=_flag(params.get(DETAILS), DETAILS),
        result=_choice(params.get(RESULT), RESULT, _RESULTS),
        trace=_optional_flag(params.get(TRACE), TRACE),
        timings=_flag(params.get(TIMINGS), TIMINGS),
        output=parse_output(params),
    )


def _expanded(rows: list[Any]) -> list[Any]:
    """Rows, with each columnar row (see `column_rows`) replaced by its rows."""
    expanded: list[Any] = []
    for row in rows:
        columns = column_rows(row) if isinstance(row, Mapping) else None
        expanded.extend([row] if columns is None else columns)
    return expanded


def parse_output(params: Mapping[str, Any]) -> OutputRequest:
    """The structured output params; at most one constraint, and none beside forced tool calls."""
    found = []
    if params.get(JSON_SCHEMA):
        found.append(Constraint.json_schema(params[JSON_SCHEMA], JSON_SCHEMA))
    if params.get(REGEX):
        found.append(Constraint.regex(params[REGEX], REGEX))
    choice = _as_list(params.get(CHOICE))
    if choice is not None and len(choice) > 0:
        found.append(Constraint.choice(choice, CHOICE))
    if params.get(GRAMMAR):
        found.append(Constraint.grammar(params[GRAMMAR], GRAMMAR))
    if len(found) > 1:
        raise InvalidParams.single(
            found[1].field, "give one output constraint: json_schema, regex, choice or grammar"
        )
    tools = parse_tools(params[TOOLS], TOOLS) if params.get(TOOLS) else ()
    tool_choice = parse_tool_choice(_tool_choice(params.get(TOOL_CHOICE), tools), tools, TOOL_CHOICE)
    if found and tool_choice.mode != "none":
        raise InvalidParams.single(found[0].field, "cannot be combined with tools unless tool_choice is none")
    return OutputRequest(found[0] if found else None, tools, tool_choice)


def _tool_choice(value: Any, tools: Sequence[Tool]) -> Any:
    """A bare function name (MLflow params are strings) means that function."""
    if isinstance(value, str) and value in {t.name for t in tools}:
        return {"type": "function", "function": {"name": value}}
    return value or None


def _records(model_input: Any) -> list[Any]:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - MLflow depends on pandas
        pd = None
    if pd is not None and isinstance(model_input, pd.DataFrame):
        return model_input.to_dict(orient="records")
    if isinstance(model_input, Sequence) and not isinstance(model_input, (str, bytes)):
        return list(model_input)
    raise InvalidRequest.single(
        "input", f"must be a string, an object, a list or a DataFrame, not {type(model_input).__name__}"
    )


def _present(value: Any) -> Any:
    """None for a missing cell (pandas fills those with None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _prompt(value: Any, where: str) -> str:
    if getattr(value, "ndim", None) == 0:  # a numpy scalar (MLflow's `{"inputs": {"prompt": "..."}}`)
        value = value.item()
    if not isinstance(value, str):
        raise InvalidRequest.single(where, f"must be a string, not {type(value).__name__}")
    if not value.strip():
        raise InvalidRequest.single(where, "the prompt is empty")
    return value


def _as_list(value: Any) -> Any:
    """A numpy array (how pandas may hold a list cell) as a list; anything else unchanged."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) else value


def _stop_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    value = _as_list(value)
    if isinstance(value, Sequence) and all(isinstance(s, str) for s in value):
        return list(value)
    raise InvalidParams.single(name, "must be a string or a list of strings")


def _optional_str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidParams.single(name, f"must be a string, not {type(value).__name__}")


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value is None:
        return choices[0]
    if value in choices:
        return value
    raise InvalidParams.single(name, f"must be one of {', '.join(choices)}; got {value!r}")


def _flag(value: Any, name: str) -> bool:
    return _optional_flag(value, name) or False


def _optional_flag(value: Any, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidParams.single(name, f"must be true or false, not {value!r}")
