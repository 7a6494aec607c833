"""Sampling parameters: one validated, immutable type shared by every engine and entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmflow.errors import FieldProblem, InvalidParams

MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 512
#: most likely tokens a logprob may come with (OpenAI's limit)
MAX_TOP_LOGPROBS = 20


class SamplingParams(BaseModel):
    """How to pick tokens and when to stop.

    Defaults follow llama.cpp's: a mild temperature with top-k, top-p and min-p filtering.
    `temperature=0` means greedy decoding (deterministic, the sampling filters are ignored).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.8, ge=0.0, le=5.0, description="0 = greedy")
    top_k: int = Field(40, ge=0, description="keep the k most likely tokens; 0 = off")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="nucleus sampling mass; 1 = off")
    min_p: float = Field(0.05, ge=0.0, le=1.0, description="drop tokens below min_p * p(top); 0 = off")
    repetition_penalty: float = Field(1.0, gt=0.0, le=5.0, description="1 = off")
    max_tokens: int = Field(256, ge=1, description="tokens to generate at most (not chunks)")
    stop: tuple[str, ...] = Field((), description="strings that end the answer; never part of the output")
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="None = random")
    logprobs: int | None = Field(
        None,
        ge=0,
        le=MAX_TOP_LOGPROBS,
        description="with each token, its logprob and this many most likely tokens' (the model's "
        "distribution, before penalties, temperature and filters); None = off",
    )
    lora: str | None = Field(
        None, min_length=1, description="a loaded LoRA adapter's name; None = the base model"
    )
    lora_scale: float = Field(1.0, ge=0.0, le=8.0, description="the adapter's weight; 0 = the base model")
    speculative: bool = Field(
        True,
        description="let an engine that speculates (prompt lookup) verify drafted tokens in the "
        "same pass; the same tokens either way, false opts out",
    )

    @field_validator("stop", mode="before")
    @classmethod
    def _normalise_stop(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        return value

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed")
        for s in value:
            if s == "":
                raise ValueError("stop strings must not be empty")
            if len(s) > MAX_STOP_LENGTH:
                raise ValueError(f"a stop string may have at most {MAX_STOP_LENGTH} characters")
        return tuple(dict.fromkeys(value))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def parse(
        cls, values: Mapping[str, Any] | SamplingParams | None = None, **overrides: Any
    ) -> SamplingParams:
        """Validate user input, raising `InvalidParams` that names every bad field at once."""
        if isinstance(values, SamplingParams):
            return values.model_copy(update=overrides) if overrides else values
        if values is not None and not isinstance(values, Mapping):
            raise InvalidParams.single("params", f"must be an object, not {type(values).__name__}")
        merged = {**(values or {}), **overrides}
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            raise InvalidParams(problems_from_validation(exc)) from None

    def merged(self, values: Mapping[str, Any] | None) -> SamplingParams:
        """These params with `values` on top, validated."""
        if not values:
            return self
        if not isinstance(values, Mapping):
            raise InvalidParams.single("params", f"must be an object, not {type(values).__name__}")
        return SamplingParams.parse({**self.model_dump(), **values})


PARAM_NAMES: tuple[str, ...] = tuple(SamplingParams.model_fields)


def problems_from_validation(exc: ValidationError) -> list[FieldProblem]:
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "params"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown parameter"
        problems.append(FieldProblem(field, message))
    return problems
