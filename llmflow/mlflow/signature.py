"""The logged model's signature: what MLflow itself checks before llmflow sees a request.

Inputs are a `prompt` string or a `messages` list of `{role, content}` (content: a string or
OpenAI's content parts, images as data URIs), and optionally `images`: a list of images (bytes,
base64 text or data URIs) for the user turn. Every sampling param is
in the `ParamSchema` with the model's default, so MLflow rejects a wrong type and fills in what
the caller left out.

MLflow types a param as a scalar or as a list, never either, so stop strings come in two params:
`stop` (one string: the seed's `"stop": "<|im_end|>"`) and `stop_sequences` (a list). Both apply.
Called without MLflow (the python model directly, or the HTTP server), `stop` may be a list too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from mlflow.models.signature import ModelSignature
from mlflow.types import ColSpec, DataType, ParamSchema, ParamSpec, Schema
from mlflow.types.schema import AnyType, Array, Object, Property

from llmflow.params import SamplingParams
from llmflow.registry_prompts import is_reference

#: params the model takes on top of the sampling params
STOP_SEQUENCES = "stop_sequences"
SYSTEM_PROMPT = "system_prompt"
DETAILS = "details"  # predict returns dicts with finish_reason and usage instead of strings
RESULT = "result"  # "struct": predict returns flat per-row dicts (Spark's struct result), see rows.py
RESULT_TEXT = "text"
RESULT_STRUCT = "struct"
TRACE = "trace"  # record an MLflow trace of this call (None: the model's setting, see observability)
TIMINGS = "timings"  # add a `timings` object: predict_stream's final chunk, predict's detail dicts
#: structured output (llmflow.constraints) and function calling (llmflow.tools)
JSON_SCHEMA = "json_schema"  # a JSON Schema as JSON text
REGEX = "regex"
CHOICE = "choice"  # a list of strings; empty: none
GRAMMAR = "grammar"  # Lark or GBNF
TOOLS = "tools"  # OpenAI's tools list as JSON text
TOOL_CHOICE = "tool_choice"  # none, auto, required, a function's name, or OpenAI's object as JSON text
OUTPUT_PARAMS = (JSON_SCHEMA, REGEX, CHOICE, GRAMMAR, TOOLS, TOOL_CHOICE)

INPUT_EXAMPLE: dict[str, Any] = {"prompt": "What is MLflow?"}

_SCALAR_TYPES = {float: DataType.double, int: DataType.long, bool: DataType.boolean, str: DataType.string}


def input_schema() -> Schema:
    """`content` is any type: a string, or OpenAI's content parts (text and `image_url` parts
    with data URIs), which the model itself checks (`llmflow.prompts.parse_messages`). `images`
    is any type too: MLflow's types hold strings or bytes, never either, and a caller may give
    either (base64 text in JSON, bytes from a binary column); the model checks each item
    (`llmflow.media.values`)."""
    message = Object([Property("role", DataType.string), Property("content", AnyType())])
    return Schema(
        [
            ColSpec(DataType.string, "prompt", required=False),
            ColSpec(Array(message), "messages", required=False),
            ColSpec(AnyType(), "images", required=False),
        ]
    )


def param_schema(
    defaults: SamplingParams, system_prompt: str | None = None, output: Mapping[str, Any] | None = None
) -> ParamSchema:
    """Every sampling param with `defaults`' value, plus `stop_sequences`, `system_prompt`,
    `details`, `result`, `trace`, `timings` and the structured output params (`output`: their
    logged defaults)."""
    output = output or {}
    specs = [
        ParamSpec(name, _scalar_type(name, field.annotation), getattr(defaults, name))
        for name, field in SamplingParams.model_fields.items()
        if name != "stop"
    ]
    specs += [
        ParamSpec("stop", DataType.string, None),
        ParamSpec(STOP_SEQUENCES, DataType.string, list(defaults.stop), (-1,)),
        # a registry prompt is left to the model, which keeps it current: no fixed default here
        ParamSpec(SYSTEM_PROMPT, DataType.string, None if is_reference(system_prompt) else system_prompt),
        ParamSpec(DETAILS, DataType.boolean, False),
        ParamSpec(RESULT, DataType.string, RESULT_TEXT),
        ParamSpec(TRACE, DataType.boolean, None),
        ParamSpec(TIMINGS, DataType.boolean, False),
        *(ParamSpec(name, DataType.string, output.get(name)) for name in (JSON_SCHEMA, REGEX, GRAMMAR)),
        ParamSpec(CHOICE, DataType.string, list(output.get(CHOICE) or []), (-1,)),
        ParamSpec(TOOLS, DataType.string, output.get(TOOLS)),
        ParamSpec(TOOL_CHOICE, DataType.string, output.get(TOOL_CHOICE)),
    ]
    return ParamSchema(specs)


def build_signature(
    defaults: SamplingParams, system_prompt: str | None = None, output: Mapping[str, Any] | None = None
) -> ModelSignature:
    return ModelSignature(
        inputs=input_schema(),
        outputs=Schema([ColSpec(DataType.string)]),
        params=param_schema(defaults, system_prompt, output),
    )


def _scalar_type(name: str, annotation: Any) -> DataType:
    """The MLflow type of a scalar sampling param (`int | None` counts as int)."""
    candidates = [t for t in (annotation, *get_args(annotation)) if t is not type(None)]
    for candidate in candidates:
        if candidate in _SCALAR_TYPES:
            return _SCALAR_TYPES[candidate]
    raise TypeError(f"no MLflow param type for sampling param {name!r} ({annotation!r})")
