"""How to load an LLM, as one piece of data: the engine and its options, CPU threads, parallel
generations, the prompt format, default params and system prompt.

Each option is named here and nowhere else. `LLM.load` takes these fields as keywords,
`save_model` / `log_model` record them (a logged model's `ModelSpec` extends this spec with what
MLflow needs), a logged model rebuilds its LLM from them, and `llmflow.mlflow.model_ref.resolve`
takes them as the overrides of every command's MODEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmflow.errors import FieldProblem, InvalidParams
from llmflow.params import SamplingParams, problems_from_validation
from llmflow.prompts import ChatTemplate, PromptFormat, PromptMap, prompt_format_of
from llmflow.registry_prompts import DEFAULT_REFRESH_S, is_reference
from llmflow.types import TemplateText

SpecT = TypeVar("SpecT", bound="LoadSpec")


class LoadSpec(BaseModel):
    """How to load an LLM from its weights. Plain data (a logged model stores it as YAML), checked
    as far as it can be without loading the weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: what a bad key is named after, in errors (`model_config.` for a logged model's spec)
    field_prefix: ClassVar[str] = ""

    engine: str | None = Field(None, description="an engine's registry name; None: from the weights")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="the engine's load options")
    threads: int | None = Field(
        None, ge=1, description="CPU threads, as the engine's thread option unless engine_options set it"
    )
    parallel: int | None = Field(None, ge=1, description="generations a batching engine decodes together")
    chat_template: str | None = Field(
        None, description="None = the template in the model's files; or a registry prompt (prompts:/...)"
    )
    prompt_map: dict[str, str] | None = Field(None, description="seed-style per-role templates")
    pre_prompt: str = ""
    post_prompt: str = ""
    default_params: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = Field(
        None, description="the text, or a registry prompt: prompts:/NAME@ALIAS, prompts:/NAME/VERSION"
    )
    prompt_refresh_s: float = Field(
        DEFAULT_REFRESH_S, gt=0, le=86400, description="seconds between re-reads of a registry alias"
    )

    @field_validator("engine_options", mode="before")
    @classmethod
    def _no_options(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("default_params", mode="before")
    @classmethod
    def _valid_params(cls, value: Any) -> dict[str, Any]:
        return params_to_config(SamplingParams.parse(value))

    @model_validator(mode="after")
    def _valid_prompts(self: SpecT) -> SpecT:
        """A broken chat template or prompt map fails here, before any weights are read."""
        if self.prompt_map is not None:
            PromptMap(self.prompt_map, self.pre_prompt, self.post_prompt)
        if self.chat_template is not None and not is_reference(self.chat_template):
            ChatTemplate(self.chat_template).validate()  # a registry template is checked once read
        return self

    @classmethod
    def parse(cls: type[SpecT], options: Mapping[str, Any] | None) -> SpecT:
        """Validate `options`, naming each bad key."""
        try:
            return cls.model_validate(dict(options or {}))
        except ValidationError as exc:
            problems = [
                FieldProblem(f"{cls.field_prefix}{p.field}", p.message) for p in problems_from_validation(exc)
            ]
            raise InvalidParams(problems) from None

    @property
    def sampling_params(self) -> SamplingParams:
        return SamplingParams.parse(self.default_params)

    def changes(self) -> dict[str, Any]:
        """The fields set to something other than their defaults."""
        return self.model_dump(exclude_defaults=True)

    def prompt_format(self, own: TemplateText) -> PromptFormat:
        """The prompt format: the prompt map, else the chat template (this spec's or the model's
        own, with the model's special tokens), else raw prompts."""
        if self.prompt_map is not None:
            return PromptMap(dict(self.prompt_map), self.pre_prompt, self.post_prompt)
        return prompt_format_of(own, self.chat_template)

    def engine_options_for(self, engine: str) -> dict[str, Any]:
        """`engine_options` with `parallel` and `threads` written in as `engine`'s own options."""
        return with_threads(engine, with_parallel(engine, self.engine_options, self.parallel), self.threads)


def with_parallel(engine: str, options: dict[str, Any], parallel: int | None) -> dict[str, Any]:
    """`parallel` as the engine's option; refused for an engine that decodes one at a time."""
    if parallel is None:
        return options
    from llmflow.engines import engine_class

    if not engine_class(engine).concurrent:
        raise InvalidParams.single(
            "parallel",
            f"the {engine} engine decodes one generation at a time; "
            "--parallel needs a batching engine (llama_cpp_batched for a GGUF model)",
        )
    return {**options, "parallel": parallel}


def with_threads(engine: str, options: dict[str, Any], threads: int | None) -> dict[str, Any]:
    """`threads` as the engine's thread option, unless the options set it already."""
    option = thread_option(engine)
    if threads is None or option is None or option in options:
        return options
    return {**options, option: threads}


def thread_option(engine: str) -> str | None:
    from llmflow.engines import engine_class

    return engine_class(engine).thread_option


def params_to_config(params: SamplingParams) -> dict[str, Any]:
    """Sampling params as plain data (`stop` as a list), for YAML and JSON."""
    data = params.model_dump()
    data["stop"] = list(params.stop)
    return data
