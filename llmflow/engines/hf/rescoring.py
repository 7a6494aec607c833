"""Logprobs for tokens that transformers' continuous batching sampled.

transformers' manager samples inside its own step and returns at most the sampled token's
logprob after its filters (temperature, top-k, top-p), with no alternatives, so a greedy request
(run there as top-k 1) would always read 0. The engine therefore scores the stream itself: the
model runs alongside, on the reading thread, with a cache of its own (`DynamicRunner`), one
forward pass per token, and each token is scored from those raw logits by the same helper as
llmflow's own decode loop (`engines/logprobs.py`). Same shapes and meaning on every engine; the
price is a second forward pass per token, paid only by requests that ask for logprobs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from llmflow.engines.logprobs import scored_tensor


def rescored(model: Any, prompt_ids: Sequence[int], tokens: Iterator[int], top: int) -> Iterator[int]:
    """`tokens` (generated after `prompt_ids`) as `ScoredToken`s with `top` alternatives each. The
    model reads the next token only once it has come, so a cancel or a close costs nothing more;
    closing this closes `tokens` (the request is cancelled inside transformers)."""
    import torch

    from llmflow.engines.hf.decode import DynamicRunner, as_prompt

    runner = DynamicRunner(model)
    device = model.device
    try:
        logits = runner.start(as_prompt(prompt_ids, device))
        for token in tokens:
            yield scored_tensor(int(token), logits, top)
            logits = runner.step(torch.tensor([int(token)], device=device))
    finally:
        runner.finish()
        close = getattr(tokens, "close", None)
        if close is not None:
            close()
