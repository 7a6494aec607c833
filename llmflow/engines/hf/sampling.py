"""Picking the next token from a row of logits, on the logits' device, with no host sync.

The filters run in llama.cpp's order (repetition penalty, top-k, top-p, min-p, then temperature)
so that the same `SamplingParams` mean the same thing on both engines. Each request owns a
`torch.Generator`, so a seed reproduces an answer whatever else runs.
"""

from __future__ import annotations

import secrets
from typing import Any

from llmflow.constraints.matcher import TokenMatcher
from llmflow.params import SamplingParams


class Sampler:
    """One request's sampling state: its params, its RNG and the tokens seen so far (for the
    repetition penalty). `__call__` takes logits of shape [vocab] and returns the token as a
    one-element long tensor on the same device."""

    def __init__(
        self,
        params: SamplingParams,
        prompt: Any,  # 1-D long tensor on the device
        max_new_tokens: int,
        constraint: TokenMatcher | None = None,
    ):
        import torch

        self._torch = torch
        self._params = params
        #: masks the logits before each pick and takes the picked token (a host sync per token)
        self._constraint = constraint
        device = prompt.device
        self._penalty = params.repetition_penalty
        self._seen = None
        if self._penalty != 1.0:
            self._seen = torch.empty(len(prompt) + max_new_tokens, dtype=torch.long, device=device)
            self._seen[: len(prompt)] = prompt
            self._n_seen = len(prompt)
        self._generator = None
        if not params.greedy:
            seed = params.seed  # the engine's default already applied (`Engine.generate`)
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(seed if seed is not None else secrets.randbits(63))

    def __call__(self, logits: Any) -> Any:
        torch = self._torch
        logits = logits.to(torch.float32, copy=True)
        if self._seen is not None:
            seen = self._seen[: self._n_seen]
            scores = logits.gather(0, seen)
            logits.scatter_(0, seen, torch.where(scores < 0, scores * self._penalty, scores / self._penalty))
        if self._constraint is not None:
            self._constraint.mask_torch(logits)
        token = logits.argmax().view(1) if self._generator is None else self._sample(logits)
        if self._constraint is not None:
            self._constraint.advance(int(token))
        if self._seen is not None and self._n_seen < len(self._seen):
            self._seen[self._n_seen : self._n_seen + 1] = token
            self._n_seen += 1
        return token

    def _sample(self, logits: Any) -> Any:
        torch = self._torch
        params = self._params
        if 0 < params.top_k < logits.numel():
            values, indices = torch.topk(logits, params.top_k)
        else:
            values, indices = torch.sort(logits, descending=True)
        if params.top_p < 1.0 or params.min_p > 0.0:
            probs = torch.softmax(values, dim=0)
            keep = torch.ones_like(probs, dtype=torch.bool)
            if params.top_p < 1.0:  # the smallest prefix whose mass reaches top_p
                keep &= (probs.cumsum(0) - probs) < params.top_p
            if params.min_p > 0.0:
                keep &= probs >= params.min_p * probs[0]
            values = values.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(values / params.temperature, dim=0)
        choice = torch.multinomial(probs, 1, generator=self._generator)
        return indices[choice]
