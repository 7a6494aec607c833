"""A batching engine without a model: the real `BatchScheduler` over a backend whose forward pass
only sleeps. `time.sleep` lets go of the GIL as `llama_decode` does, so the scheduler, the
request threads and the server's event loop share the interpreter as they do on a GPU, where a
step of 64 sequences takes about as long whatever the server does meanwhile."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from llmflow.engines.base import TokenRequest
from llmflow.engines.scheduler import BatchEntry, BatchScheduler, SchedulerStats
from tests.fakes.scripted_engine import ScriptedEngine

#: the answer's bytes, one a token, round and round (never the end-of-generation token)
LETTERS = b"abcdefghijklmnopqrstuvwxyz "


class SleepingBackend:
    """A forward pass sleeps `decode_s` when it decodes (a token of some sequence) plus
    `prefill_s_per_token` per prompt token; every sampled token is the next letter of `LETTERS`."""

    def __init__(self, decode_s: float, prefill_s_per_token: float = 0.0):
        self.decode_s = decode_s
        self.prefill_s_per_token = prefill_s_per_token
        self._letters = itertools.cycle(LETTERS)

    def decode(self, entries: Sequence[BatchEntry]) -> list[int]:
        decoding = sum(1 for e in entries if len(e.tokens) == 1)
        prompt = sum(len(e.tokens) for e in entries) - decoding
        time.sleep((self.decode_s if decoding else 0.0) + self.prefill_s_per_token * prompt)
        return [next(self._letters) for e in entries if e.sample]

    def new_sampler(self, params: Any) -> Any:
        return None

    def free_sampler(self, sampler: Any) -> None:
        pass

    def copy(self, src: int, dst: int) -> None:
        pass

    def truncate(self, seq: int, keep: int) -> int:
        return keep

    def idle(self) -> None:
        pass


class SteppedEngine(ScriptedEngine):
    """`parallel` generations at once, each step one pass (as on a GPU) of `decode_s`."""

    name: ClassVar[str] = "stepped"
    concurrent: ClassVar[bool] = True
    model_name = "stepped"

    def __init__(self, parallel: int = 64, decode_s: float = 0.0135, prefill_s_per_token: float = 0.0,
                 n_ctx: int = 2048):  # fmt: skip
        super().__init__(n_ctx=n_ctx)
        self._parallel = parallel
        self._scheduler = BatchScheduler(
            SleepingBackend(decode_s, prefill_s_per_token),
            parallel=parallel,
            n_ctx=n_ctx,
            n_batch=2048,
            prefill_chunk=512,
            eos_token_ids=self.eos_token_ids,
            one_pass=True,
        )

    @property
    def max_concurrency(self) -> int:  # type: ignore[override]
        return self._parallel

    def tokens(self, request: TokenRequest) -> Iterator[int]:
        return self._scheduler.generate(request)

    def stats(self) -> SchedulerStats:
        return self._scheduler.stats()

    def close(self) -> None:
        self._scheduler.close()
