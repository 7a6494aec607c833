"""Logprobs from a row of logits: the sampled token's and the most likely tokens', from the
model's own distribution (log-softmax of the raw logits: before repetition penalty, temperature
and the top-k / top-p / min-p filters, as vLLM's default `raw_logprobs`). Shared by the llama.cpp
engines and the transformers engine; kept apart from the sampling code so that changes there do
not touch it."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmflow.types import ScoredToken


def scored(token: int, logits: np.ndarray, top: int) -> ScoredToken:
    """`token` with its logprob under `logits` (a [vocab] row) and the `top` most likely
    tokens' (id, logprob), most likely first."""
    row = logits.astype(np.float32, copy=False)
    peak = float(row.max())
    log_total = peak + float(np.log(np.exp(row - peak).sum()))
    pairs: tuple[tuple[int, float], ...] = ()
    if top > 0:
        pairs = tuple((int(i), float(row[i]) - log_total) for i in top_ids(row, top))
    return ScoredToken(token, float(row[token]) - log_total, pairs)


def top_ids(row: np.ndarray, top: int, stride: int = 16) -> np.ndarray:
    """Ids of the `top` largest values, largest first. The `top`-th largest of every `stride`-th
    value is a floor that at least `top` values reach, so only the few above it are ranked: a
    tenth of `argpartition` over a whole vocabulary's row."""
    candidates = np.arange(row.size)
    if row.size >= stride * top * 4:
        floor = np.partition(row[::stride], -top)[-top]
        candidates = np.flatnonzero(row >= floor)
    if candidates.size > top:
        candidates = candidates[np.argpartition(row[candidates], -top)[-top:]]
    return candidates[np.argsort(-row[candidates], kind="stable")]


def scored_tensor(token: int, logits: Any, top: int) -> ScoredToken:
    """`scored` for a torch tensor of logits (the transformers engine), on its device."""
    import torch

    with torch.inference_mode():
        log_probs = torch.log_softmax(logits.to(torch.float32), dim=-1)
        pairs: tuple[tuple[int, float], ...] = ()
        if top > 0:
            values, ids = torch.topk(log_probs, top)
            pairs = tuple(zip(ids.tolist(), values.tolist(), strict=True))
        return ScoredToken(token, float(log_probs[token]), pairs)
