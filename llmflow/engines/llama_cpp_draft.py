"""A draft model for the one-at-a-time llama.cpp engine's speculation: a small GGUF of the same
vocabulary whose greedy continuation of a generation's tokens is the draft the large model
verifies (`engines/speculation.py`).

The draft is the small model's argmax, a fixed function of the tokens so far, so verifying it
keeps the large model's sampled distribution exactly (see `speculation`'s rule). The draft
model's context keeps what it last read: a generation's next draft feeds only the tokens taken
since (and rewinds past its own rejected proposals), so drafting costs one small forward pass per
proposed token plus one for what the large model added."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmflow.engines.llama_cpp_loop import ContextSteps
from llmflow.engines.prompt_cache import common_prefix


class DraftModel:
    """One draft model and its context; used by the thread that decodes (one generation at a time)."""

    def __init__(self, lib: Any, llama: Any, n_vocab: int):
        self._llama = llama
        self._steps = ContextSteps(lib, llama, n_vocab)
        #: the tokens the draft context holds, in order (its KV cells)
        self._held: list[int] = []

    def session(self, prompt: Sequence[int]) -> DraftSession:
        """The proposer of one generation whose prompt is `prompt`."""
        return DraftSession(self, prompt)

    def continue_greedily(self, tokens: Sequence[int], k: int) -> list[int]:
        """The draft model's `k` most likely next tokens after `tokens`, one after another."""
        if k <= 0 or not tokens:
            return []
        steps, held = self._steps, self._held
        keep = min(common_prefix(held, tokens), len(tokens) - 1)  # logits need one token fed
        if keep < len(held):
            steps.rewind(keep)
            del held[keep:]
        new = list(tokens[keep:])
        steps.feed(new, rows=1)
        held.extend(new)
        draft: list[int] = []
        while True:
            token = int(steps.logits(-1).argmax())
            draft.append(token)
            if len(draft) == k or len(held) + 1 >= self.n_ctx:
                return draft
            steps.feed([token], rows=1)
            held.append(token)

    @property
    def n_ctx(self) -> int:
        return int(self._llama.n_ctx())

    def close(self) -> None:
        self._steps.close()
        self._llama.close()


class DraftSession:
    """A `Proposer` over a draft model for one generation: its tokens so far (prompt and answer)."""

    __slots__ = ("_model", "_tokens")

    def __init__(self, model: DraftModel, prompt: Sequence[int]):
        self._model = model
        self._tokens = list(prompt)

    def append(self, token: int) -> None:
        self._tokens.append(int(token))

    def propose(self, k: int) -> list[int]:
        return self._model.continue_greedily(self._tokens, k)
