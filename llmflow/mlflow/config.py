"""What a logged model records about itself: the `model_config` of its MLmodel file.

Everything needed to rebuild the `LLM` lives here as plain data (YAML in the MLmodel), so that
loading never unpickles an engine object, and `mlflow.pyfunc.load_model(uri, model_config=...)`
can override a key (for example `engine_options`) at load time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, field_validator

from llmflow.errors import FieldProblem, InvalidParams
from llmflow.load_spec import LoadSpec

if TYPE_CHECKING:
    from llmflow.llm import LLM

#: bumped when the meaning of a key changes; a newer format than this llmflow knows is refused
FORMAT_VERSION = 1
#: the name of the weights artifact in the logged model (`context.artifacts["model"]`)
WEIGHTS_ARTIFACT = "model"
#: the prefix of a LoRA adapter's artifact name (`lora.NAME`)
LORA_ARTIFACT = "lora."
#: the name of a vision model's projector artifact
PROJECTOR_ARTIFACT = "projector"


class ModelSpec(LoadSpec):
    """How to rebuild the LLM of a logged model: its `LoadSpec`, with the engine always named,
    and what MLflow needs beside it. Stored as the MLmodel's `model_config`."""

    field_prefix: ClassVar[str] = "model_config."

    format_version: int = FORMAT_VERSION
    llmflow_version: str = ""
    model_name: str = Field("", description="a display name, e.g. the weights file's stem")
    engine: str
    default_output: dict[str, Any] | None = Field(
        None,
        description="default structured output params (json_schema, regex, choice, grammar, tools, "
        "tool_choice): the signature's param defaults",
    )
    weights_path: str | None = Field(
        None, description="reference mode: a local path recorded instead of a copied artifact"
    )
    tracing: bool | None = Field(
        None, description="record MLflow traces; None: only when an experiment is set (observability)"
    )
    lora: dict[str, str] | None = Field(
        None,
        description="LoRA adapters, name -> their file: an artifact of the model (`lora.NAME`), or in "
        "reference mode a local path",
    )

    projector: str | None = Field(
        None,
        description="a vision model's projector file (llama.cpp's `mmproj`): an artifact of the model "
        "(`projector`), or in reference mode a local path",
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

    @property
    def by_reference(self) -> bool:
        return self.weights_path is not None

    def to_config(self) -> dict[str, Any]:
        """Plain YAML-able data, without keys left at None (the MLmodel stays short)."""
        return self.model_dump(mode="json", exclude_none=True)

    def with_adapters(self, artifacts: dict[str, str]) -> ModelSpec:
        """This spec with its LoRA adapters as the engine's `lora` option, at their artifacts'
        local paths (or the paths recorded in reference mode)."""
        if not self.lora:
            return self
        paths = {name: artifacts.get(f"{LORA_ARTIFACT}{name}", path) for name, path in self.lora.items()}
        options = {**self.engine_options, "lora": {**paths, **self.engine_options.get("lora", {})}}
        return self.model_copy(update={"engine_options": options})

    def with_projector(self, artifacts: dict[str, str]) -> ModelSpec:
        """This spec with its projector as the engine's projector option, at its artifact's local
        path (or the path recorded in reference mode)."""
        if self.projector is None:
            return self
        from llmflow.engines import engine_class

        option = engine_class(str(self.engine)).projector_option
        if option is None:
            return self
        path = artifacts.get(PROJECTOR_ARTIFACT, self.projector)
        return self.model_copy(update={"engine_options": {**self.engine_options, option: path}})

    def load_llm(self, weights: Path) -> LLM:
        """The LLM this spec describes, with its weights at `weights`. Bad engine options (or a
        `parallel` the engine cannot use) are named as the `model_config` keys to fix."""
        from llmflow.llm import LLM

        try:
            return LLM.from_spec(self, weights)
        except InvalidParams as exc:  # the rest of the spec was checked already
            problems = [FieldProblem(self._key_of(p.field), p.message) for p in exc.problems]
            raise InvalidParams(problems) from None

    def _key_of(self, field: str) -> str:
        own = field if field == "parallel" and self.parallel is not None else f"engine_options.{field}"
        return f"{self.field_prefix}{own}"
