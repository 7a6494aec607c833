"""What a logged model records about itself: the `model_config` of its MLmodel file.

Everything needed to rebuild the `LLM` lives here as plain data (YAML in the MLmodel), so that
loading never unpickles an engine object, and `mlflow.pyfunc.load_model(uri, model_config=...)`
can override a key (for example `engine_options`) at load time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmflow.errors import FieldProblem, InvalidParams
from llmflow.params import SamplingParams, problems_from_validation

if TYPE_CHECKING:
    from llmflow.llm import LLM

#: bumped when the meaning of a key changes; a newer format than this llmflow knows is refused
FORMAT_VERSION = 1
#: the name of the weights artifact in the logged model (`context.artifacts["model"]`)
WEIGHTS_ARTIFACT = "model"


class ModelSpec(BaseModel):
    """How to rebuild the LLM of a logged model. Stored as the MLmodel's `model_config`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int = FORMAT_VERSION
    llmflow_version: str = ""
    model_name: str = Field("", description="a display name, e.g. the weights file's stem")
    engine: str
    engine_options: dict[str, Any] = Field(default_factory=dict)
    chat_template: str | None = Field(None, description="None = the template in the model's files")
    prompt_map: dict[str, str] | None = Field(None, description="seed-style per-role templates")
    pre_prompt: str = ""
    post_prompt: str = ""
    default_params: dict[str, Any] = Field(default_factory=dict)
    default_output: dict[str, Any] | None = Field(
        None,
        description="default structured output params (json_schema, regex, choice, grammar, tools, "
        "tool_choice): the signature's param defaults",
    )
    system_prompt: str | None = None
    weights_path: str | None = Field(
        None, description="reference mode: a local path recorded instead of a copied artifact"
    )
    tracing: bool | None = Field(
        None, description="record MLflow traces; None: only when an experiment is set (observability)"
    )

    @field_validator("format_version")
    @classmethod
    def _known_format(cls, value: int) -> int:
        if value > FORMAT_VERSION:
            raise ValueError(
                f"this model was logged with a newer llmflow (format {value}); "
                f"this llmflow reads format {FORMAT_VERSION} at most: upgrade llmflow"
            )
        return value

    @field_validator("default_params")
    @classmethod
    def _valid_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        return params_to_config(SamplingParams.parse(value))

    @field_validator("default_output")
    @classmethod
    def _valid_output(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from llmflow.mlflow.inputs import parse_output
        from llmflow.mlflow.signature import OUTPUT_PARAMS

        if not value:
            return None
        unknown = sorted(set(value) - set(OUTPUT_PARAMS))
        if unknown:
            raise ValueError(f"unknown structured output params: {', '.join(unknown)}")
        parse_output(value)  # an invalid schema or tool list fails at log time
        return value

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> ModelSpec:
        """Validate a `model_config` (possibly with load-time overrides), naming each bad key."""
        try:
            return cls.model_validate(dict(config or {}))
        except ValidationError as exc:
            problems = [
                FieldProblem(f"model_config.{p.field}", p.message) for p in problems_from_validation(exc)
            ]
            raise InvalidParams(problems) from None

    @property
    def sampling_params(self) -> SamplingParams:
        return SamplingParams.parse(self.default_params)

    @property
    def by_reference(self) -> bool:
        return self.weights_path is not None

    def to_config(self) -> dict[str, Any]:
        """Plain YAML-able data, without keys left at None (the MLmodel stays short)."""
        return self.model_dump(mode="json", exclude_none=True)

    def load_llm(self, weights: Path) -> LLM:
        """The LLM this spec describes, with its weights at `weights`. Bad engine options are named
        as the `model_config` keys to fix."""
        from llmflow.llm import LLM

        try:
            return LLM.load(
                weights,
                engine=self.engine,
                engine_options=self.engine_options,
                chat_template=self.chat_template,
                prompt_map=self.prompt_map,
                pre_prompt=self.pre_prompt,
                post_prompt=self.post_prompt,
                default_params=self.sampling_params,
                system_prompt=self.system_prompt,
            )
        except InvalidParams as exc:  # the default params were checked already: engine options
            key = "model_config.engine_options"
            raise InvalidParams([FieldProblem(f"{key}.{p.field}", p.message) for p in exc.problems]) from None


def params_to_config(params: SamplingParams) -> dict[str, Any]:
    """Sampling params as plain data (`stop` as a list), for YAML and JSON."""
    data = params.model_dump()
    data["stop"] = list(params.stop)
    return data
