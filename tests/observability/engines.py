"""Engines for the failure paths: the scripted engine, failing in the middle of a stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from llmflow.engines.base import TokenRequest
from tests.fakes.scripted_engine import ScriptedEngine

FAIL_AFTER = 20


class EngineFailure(RuntimeError):
    """What a broken engine raises."""


class FailingEngine(ScriptedEngine):
    """Streams FAIL_AFTER tokens of the scripted answer, then raises."""

    name: ClassVar[str] = "failing"

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        for produced, token in enumerate(super().tokens(request)):
            if produced == FAIL_AFTER:
                raise EngineFailure("the engine fell over")
            yield token
