"""llmflow's own decode loop for one stream: prefill, then one forward pass per token.

No `generate()` and no streamer thread: the loop is a generator, so a cancel or a closed stream
stops it between two tokens. Two KV-cache strategies:

- `DynamicRunner`: a fresh `DynamicCache` per request that grows with the answer (the CPU default).
- `StaticRunner`: one preallocated `StaticCache` reused by every request; the decode step can be
  compiled and captured as a CUDA graph, so a token costs one graph replay (the CUDA default).

On CUDA the loop runs one token ahead: the next forward pass is queued before the current token
is copied to the host, so the GPU never waits for the streaming code in between.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from llmflow.engines.hf.sampling import Sampler
from llmflow.engines.logprobs import scored_tensor
from llmflow.types import CancelToken

log = logging.getLogger(__name__)


class Runner(Protocol):
    def start(self, prompt: Any, embeds: Any = None) -> Any:
        """Prefill a [1, n] prompt into a clean cache (`embeds`, [1, n, hidden]: its embeddings,
        a prompt with images); logits [vocab] of the last position."""
        ...

    def step(self, token: Any) -> Any:
        """Decode one token (a one-element tensor); logits [vocab]."""
        ...

    def finish(self) -> None:
        """The request is over: drop what it holds."""
        ...


def cache_keyword(model: Any) -> str:
    """transformers 5.2x renamed `past_key_values` to `cache`; accept either."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class DynamicRunner:
    """A growing cache per request: memory follows the answer's length; nothing compiled."""

    def __init__(self, model: Any):
        import torch
        from transformers import DynamicCache

        self._torch = torch
        self._model = model
        self._new_cache = lambda: DynamicCache(config=model.config)
        self._keyword = cache_keyword(model)
        self._cache: Any = None

    def start(self, prompt: Any, embeds: Any = None) -> Any:
        self._cache = self._new_cache()
        return self._forward(prompt, embeds)

    def step(self, token: Any) -> Any:
        return self._forward(token.view(1, 1))

    def finish(self) -> None:
        self._cache = None

    def _forward(self, ids: Any, embeds: Any = None) -> Any:
        with self._torch.inference_mode():
            out = self._model(
                **_inputs(ids, embeds), use_cache=True, logits_to_keep=1, **{self._keyword: self._cache}
            )
        return out.logits[0, -1]


class StaticRunner:
    """One `StaticCache` of `n_ctx` tokens for every request (requests run one at a time).

    The prefill runs eagerly (prompt lengths vary); the decode step has fixed shapes, so it can
    be compiled and then captured once as a CUDA graph that is replayed for every token. When
    capture fails (an operation that syncs with the host, say), the compiled step runs as is.
    """

    def __init__(self, model: Any, n_ctx: int, *, compile: bool, cuda_graphs: bool):
        import torch
        from transformers import StaticCache

        self._torch = torch
        self._model = model
        self._cache = StaticCache(config=model.config, max_cache_len=n_ctx)
        self._keyword = cache_keyword(model)
        self._decode = self._eager_decode
        if compile:
            self._decode = torch.compile(self._eager_decode, fullgraph=False, dynamic=False)
        self._want_graph = cuda_graphs
        self._graph: Any = None
        self._graph_ids: Any = None
        self._graph_logits: Any = None

    @property
    def uses_cuda_graph(self) -> bool:
        return self._graph is not None

    def warmup(self, device: Any, steps: int = 4) -> None:
        """Compile (and capture) now, so the first request does not pay for it."""
        torch = self._torch
        prompt = torch.zeros((1, 8), dtype=torch.long, device=device)
        token = torch.zeros(1, dtype=torch.long, device=device)
        self.start(prompt)
        for _ in range(steps):
            self._run_decode(token.view(1, 1))
        if self._want_graph:
            self._capture(token.view(1, 1))
        self.finish()

    def start(self, prompt: Any, embeds: Any = None) -> Any:
        with self._torch.inference_mode():
            self._cache.reset()
            out = self._model(
                **_inputs(prompt, embeds), use_cache=True, logits_to_keep=1, **{self._keyword: self._cache}
            )
        return out.logits[0, -1]

    def step(self, token: Any) -> Any:
        if self._graph is not None:
            self._graph_ids.copy_(token.view(1, 1))
            self._graph.replay()
            return self._graph_logits
        return self._run_decode(token.view(1, 1))

    def finish(self) -> None:
        pass  # the cache is reset by the next start

    def _eager_decode(self, ids: Any) -> Any:
        out = self._model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._keyword: self._cache})
        return out.logits[0, -1]

    def _run_decode(self, ids: Any) -> Any:
        with self._torch.inference_mode():
            return self._decode(ids)

    def _capture(self, ids: Any) -> None:
        torch = self._torch
        static_ids = ids.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.inference_mode(), torch.cuda.stream(side):
                for _ in range(2):  # warm up on the capture stream (cuBLAS workspaces, lazy init)
                    self._decode(static_ids)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(graph):
                logits = self._decode(static_ids)
        except Exception as exc:  # capture is an optimisation: fall back to the compiled step
            log.warning("CUDA graph capture of the decode step failed, decoding without it: %s", exc)
            torch.cuda.synchronize()
            return
        self._graph, self._graph_ids, self._graph_logits = graph, static_ids, logits


def _inputs(ids: Any, embeds: Any) -> dict[str, Any]:
    """A forward pass's input: the ids, or their embeddings where the caller made them."""
    return {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}


class _HostToken:
    """Copies a token to the host without waiting for work queued after it (CUDA)."""

    def __init__(self, torch: Any):
        self._buffer = torch.empty(1, dtype=torch.long, pin_memory=True)
        self._event = torch.cuda.Event()

    def fetch(self, token: Any) -> None:
        self._buffer.copy_(token, non_blocking=True)
        self._event.record()

    def wait(self) -> int:
        self._event.synchronize()
        return int(self._buffer[0])


def decode_tokens(
    runner: Runner,
    sampler: Sampler,
    prompt: Any,
    limit: int,
    cancel: CancelToken,
    *,
    pipelined: bool,
    logprobs: int | None = None,
    embeds: Any = None,
) -> Iterator[int]:
    """Yield up to `limit` sampled token ids; stop between two tokens on cancel or close. With
    `logprobs`, each as a `ScoredToken` (see `llmflow.engines.logprobs`; not pipelined then).
    `embeds`: the prompt's embeddings, prefilled instead of its ids (a prompt with images)."""
    import torch

    host = _HostToken(torch) if pipelined and logprobs is None else None
    try:
        with torch.inference_mode():
            logits = runner.start(prompt, embeds)
            token = sampler(logits)
        for produced in range(1, limit + 1):
            ahead = host is not None and produced < limit
            if ahead:
                host.fetch(token)
                token = _next(runner, sampler, token, torch)
                value = host.wait()
            elif logprobs is None:
                value = int(token)
            else:
                value = scored_tensor(int(token), logits, logprobs)
            yield value
            if produced == limit or cancel.cancelled:
                return
            if not ahead:
                logits = runner.step(token)
                with torch.inference_mode():
                    token = sampler(logits)
    finally:
        runner.finish()


def _next(runner: Runner, sampler: Sampler, token: Any, torch: Any) -> Any:
    logits = runner.step(token)
    with torch.inference_mode():
        return sampler(logits)


def as_prompt(prompt_ids: Sequence[int], device: Any) -> Any:
    import torch

    return torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
