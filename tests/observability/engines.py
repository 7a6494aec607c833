"""Engines for the failure paths: the scripted engine, failing in the middle of a stream."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

from llmflow.constraints.matcher import TokenMatcher
from llmflow.params import SamplingParams
from llmflow.types import CancelToken
from tests.fakes.scripted_engine import ScriptedEngine

FAIL_AFTER = 20


class EngineFailure(RuntimeError):
    """What a broken engine raises."""


class FailingEngine(ScriptedEngine):
    """Streams FAIL_AFTER tokens of the scripted answer, then raises."""

    name: ClassVar[str] = "failing"

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        constraint: TokenMatcher | None = None,
    ) -> Iterator[int]:
        for produced, token in enumerate(super().generate(prompt_ids, params, cancel, constraint)):
            if produced == FAIL_AFTER:
                raise EngineFailure("the engine fell over")
            yield token
