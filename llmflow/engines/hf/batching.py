"""Concurrent streams through transformers' continuous batching.

transformers' `ContinuousBatchingManager` runs one background thread that decodes every active
request in one batch (paged KV cache, new requests join between steps). Each llmflow stream adds
a request with `streaming=True` and reads its outputs; closing or cancelling the stream calls
`cancel_request`, which frees the request's cache blocks at the next step.

What transformers lets each request choose (`per_request_processors=True`): `temperature`,
`top_k`, `top_p`, `max_new_tokens` and the EOS ids. What it does not:

- `seed`: one RNG for the whole batch (seeded by the engine's `seed` option), so a seeded
  request is not reproducible; greedy requests (`temperature=0`, run as `top_k=1`) are.
- `min_p` and `repetition_penalty`: no per-request version exists; they are not applied.
- the filter order is transformers' (temperature, top-k, top-p), not llama.cpp's.
Requests that ask for what is not honoured are served, and the engine logs a warning once.

One router thread reads the manager's shared output queue (`get_result`) and hands each output
to its stream's own queue, so a slow consumer never holds up the others; transformers'
`request_id_iter` would make every consumer scan, and re-queue, everyone else's outputs.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from llmflow.errors import EngineFailed
from llmflow.params import SamplingParams
from llmflow.types import CancelToken

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a waiting stream looks at its cancel token
# Engine-wide values that make transformers create the per-request processors; every request
# overrides them with its own.
_BASE_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95}


@dataclass(frozen=True)
class BatchingSetup:
    """How big the batch and its paged KV cache are."""

    max_concurrency: int
    max_sequence: int  # prompt + answer, tokens
    max_batch_tokens: int
    max_memory_percent: float | None = None
    seed: int | None = None
    page_size: int = 32  # tokens per cache block
    #: per-request temperature/top_k/top_p; False decodes every request greedily (no vocabulary
    #: sorts per step)
    sampling: bool = True

    def cache_blocks(self) -> int:
        """Blocks for `max_concurrency` full-length sequences. transformers otherwise sizes the paged
        cache from free memory (90% of a GPU, 60% of RAM on a CPU), and its attention masks with it."""
        return self.max_concurrency * (-(-self.max_sequence // self.page_size) + 1)

    def transformers_config(self) -> Any:
        from transformers import ContinuousBatchingConfig

        return ContinuousBatchingConfig(
            per_request_processors=self.sampling,
            page_size=self.page_size,
            max_requests_per_batch=self.max_concurrency,
            max_batch_tokens=self.max_batch_tokens,
            num_blocks=None if self.max_memory_percent else self.cache_blocks(),
            max_memory_percent=self.max_memory_percent,
            seed=self.seed,
        )


class ContinuousBatcher:
    """Owns a started `ContinuousBatchingManager` and routes its outputs to streams."""

    def __init__(self, model: Any, eos_token_ids: Sequence[int], setup: BatchingSetup, *, warmup: bool):
        from transformers import GenerationConfig
        from transformers.generation.continuous_batching.utils import WorkloadHints

        self._vocab_size = model.config.get_text_config().vocab_size
        self._eos = list(eos_token_ids) or -1
        self._sampling = setup.sampling
        #: the batch RNG's seed: a request whose seed is this one (the engine's default) asks for nothing more
        self._seed = setup.seed
        sampling = {"do_sample": True, **_BASE_SAMPLING} if setup.sampling else {"do_sample": False}
        generation_config = GenerationConfig(eos_token_id=self._eos, **sampling)
        hints = WorkloadHints(
            max_prompt_length=setup.max_sequence, max_generated_length=0, num_requests=setup.max_concurrency
        )
        self._manager = model.init_continuous_batching(generation_config, setup.transformers_config(), hints)
        if warmup:
            self._manager.warmup()
        self._manager.start()
        self._streams: dict[str, queue.SimpleQueue] = {}
        self._ids = itertools.count()
        self._warned: set[str] = set()
        self._failure: str | None = None
        self._closing = threading.Event()
        self._router = threading.Thread(target=self._route, name="llmflow-cb-router", daemon=True)
        self._router.start()

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, limit: int, cancel: CancelToken
    ) -> Iterator[int]:
        request_id = f"llmflow-{next(self._ids)}"
        outputs: queue.SimpleQueue = queue.SimpleQueue()
        self._streams[request_id] = outputs
        finished = False
        try:
            self._add(request_id, prompt_ids, params, limit)
            seen = 0
            while not finished:
                output = self._next_output(outputs, cancel)
                if output is None:
                    return  # cancelled while waiting
                finished = output.is_finished()
                tokens = output.generated_tokens
                yield from tokens[seen:]
                seen = len(tokens)
                if cancel.cancelled:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._manager.cancel_request(request_id)

    def close(self) -> None:
        self._closing.set()
        self._manager.stop(block=True, timeout=10)
        self._router.join(timeout=10)

    def _add(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams, limit: int) -> None:
        self._warn_unsupported(params)
        added = self._manager.add_request(
            list(prompt_ids),
            request_id=request_id,
            max_new_tokens=limit,
            streaming=True,
            eos_token_id=self._eos,
            **self._request_sampling(params),
        )
        if added is None:
            raise EngineFailed(
                "the continuous-batching manager is not accepting requests (stopping or failed)"
            )

    def _request_sampling(self, params: SamplingParams) -> dict[str, Any]:
        if not self._sampling:
            return {}
        if params.greedy:  # do_sample is engine-wide, so greedy is top-k 1
            return {"temperature": 1.0, "top_k": 1, "top_p": 1.0}
        top_k = params.top_k if 0 < params.top_k < self._vocab_size else self._vocab_size
        return {"temperature": float(params.temperature), "top_k": int(top_k), "top_p": float(params.top_p)}

    def _next_output(self, outputs: queue.SimpleQueue, cancel: CancelToken) -> Any:
        while True:
            try:
                output = outputs.get(timeout=POLL_S)
            except queue.Empty:
                if cancel.cancelled:
                    return None
                if self._failure is not None:
                    raise EngineFailed(self._failure) from None
                continue
            if output.error is not None:
                raise EngineFailed(f"continuous batching failed this request: {output.error}")
            return output

    def _route(self) -> None:
        manager = self._manager
        while not self._closing.is_set():
            output = manager.get_result(timeout=POLL_S)
            if output is not None:
                stream = self._streams.get(output.request_id)
                if stream is not None:
                    stream.put(output)
            elif not manager.is_running():
                if not self._closing.is_set():
                    self._failure = "the continuous-batching thread stopped"
                    log.error(self._failure)
                return

    def _warn_unsupported(self, params: SamplingParams) -> None:
        asked = {
            "temperature": not self._sampling and not params.greedy,
            "seed": params.seed not in (None, self._seed) and not params.greedy,
            "min_p": params.min_p > 0.0 and not params.greedy,
            "repetition_penalty": params.repetition_penalty != 1.0,
        }
        for name, used in asked.items():
            if used and name not in self._warned:
                self._warned.add(name)
                log.warning(
                    "continuous batching does not apply a per-request %s; requests asking for one are "
                    "served without it",
                    name,
                )
