"""Draft models for the llama.cpp engines' speculation: a small GGUF of the same vocabulary whose
greedy continuation of a generation's tokens is the draft the large model verifies
(`engines/speculation.py`); `DraftModel` for the one-at-a-time engine, `BatchedDraftModel` for
the batching one.

The draft is the small model's argmax, a fixed function of the tokens so far, so verifying it
keeps the large model's sampled distribution exactly (see `speculation`'s rule). The draft
model's context keeps what it last read: a generation's next draft feeds only the tokens taken
since (and rewinds past its own rejected proposals), so drafting costs one small forward pass per
proposed token plus one for what the large model added."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmflow.engines.llama_cpp_loop import GREEDY, ContextSteps
from llmflow.engines.prompt_cache import common_prefix
from llmflow.engines.scheduler import BatchEntry
from llmflow.errors import EngineFailed


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

    @property
    def llama(self) -> Any:
        """The draft model's llama-cpp-python `Llama` (its weights and context)."""
        return self._llama

    def close(self) -> None:
        self._steps.close()
        self._llama.close()


class DraftSession:
    """A `Proposer` over a draft model for one generation: its tokens so far (prompt and answer)."""

    __slots__ = ("_model", "_tokens")
    #: a draft model's proposals are its own, never a copy picked up
    continues = False

    def __init__(self, model: DraftModel, prompt: Sequence[int]):
        self._model = model
        self._tokens = list(prompt)

    def append(self, token: int) -> None:
        self._tokens.append(int(token))

    def propose(self, k: int) -> list[int]:
        return self._model.continue_greedily(self._tokens, k)


class BatchedDraftModel:
    """A draft model for the batching engine: a context of its own with a sequence per generation
    slot (the scheduler's sequence ids), so every decoding generation's draft comes from the same
    few passes: one that feeds each sequence what it has not read yet (rewinding past rejected
    proposals, or past a finished generation's tokens when its slot is taken again), then one per
    further draft token. The context keeps what it read, as `DraftModel`'s does. Used from the
    scheduler thread only."""

    def __init__(self, backend: Any):
        #: the draft model's `LlamaStepBackend` (its own model and context), greedy rows only
        self._backend = backend
        #: the tokens each sequence of the draft context holds, in order (its KV cells)
        self._held: list[list[int]] = [[] for _ in range(backend.parallel)]
        #: how many of them were the generation's own tokens when last read (the rest are drafts)
        self._read: list[int] = [0] * backend.parallel

    def continue_greedily(self, wants: Mapping[int, tuple[Sequence[int], int]]) -> dict[int, list[int]]:
        """For each sequence id, the draft model's `k` most likely next tokens after `tokens`."""
        feeds: dict[int, list[int]] = {}
        for seq, (tokens, k) in wants.items():
            if k > 0 and tokens:
                feeds[seq] = self._unread(seq, tokens)
        drafts: dict[int, list[int]] = {seq: [] for seq in feeds}
        if not feeds:
            return drafts
        limits = {seq: min(wants[seq][1], self._backend.n_ctx_seq - len(self._held[seq]) - len(feed))
                  for seq, feed in feeds.items()}  # fmt: skip
        try:
            last = self._catch_up(feeds)
            while last:
                for seq, token in last.items():
                    drafts[seq].append(token)
                going = {seq: token for seq, token in last.items() if len(drafts[seq]) < limits[seq]}
                last = self._pass({seq: [token] for seq, token in going.items()}) if going else {}
        except EngineFailed:
            # a draft is only a guess: this step verifies none, and the sequences start afresh
            for seq in feeds:
                self._backend.truncate(seq, 0)
                self._held[seq].clear()
                self._read[seq] = 0
            return {}
        return drafts

    def _unread(self, seq: int, tokens: Sequence[int]) -> list[int]:
        """The tokens of `seq` its context has not read (at least the last one, whose logits the
        draft continues), once the context is cut back to what it shares with them."""
        held, read = self._held[seq], self._read[seq]
        # the same generation as last step: only the drafts fed since may differ (one C-level
        # comparison, not a search over the whole conversation); else a new one took the slot
        if 0 < read <= min(len(held), len(tokens)) and held[:read] == tokens[:read]:
            shared = read + common_prefix(held[read:], tokens[read:])
        else:
            shared = common_prefix(held, tokens)
        keep = min(shared, len(tokens) - 1)
        if keep < len(held):
            keep = self._backend.truncate(seq, keep)
            del held[keep:]
        self._read[seq] = len(tokens)
        return list(tokens[keep:])

    def _catch_up(self, feeds: dict[int, list[int]]) -> dict[int, int]:
        """Feed each sequence its unread tokens, in passes of at most a batch: the first draft
        token of each, from the logits after its last one."""
        room = self._backend.n_batch
        first: dict[int, int] = {}
        pending = dict(feeds)
        while pending:
            chunk: dict[int, list[int]] = {}
            left = room
            for seq, feed in list(pending.items()):
                if left <= 0:
                    break
                part = feed[:left]
                chunk[seq] = part
                left -= len(part)
                if len(part) == len(feed):
                    del pending[seq]
                else:
                    pending[seq] = feed[len(part) :]
            sampled = self._pass(chunk, sample={seq for seq in chunk if seq not in pending})
            first.update(sampled)
        return first

    def _pass(self, feeds: dict[int, list[int]], sample: set[int] | None = None) -> dict[int, int]:
        """One forward pass of the draft model over `feeds` (all of them sampled unless `sample`
        says which): the greedy token after each sampled sequence's last fed token."""
        entries = []
        for seq in sorted(feeds):
            tokens = feeds[seq]
            held = self._held[seq]
            takes = sample is None or seq in sample
            entries.append(BatchEntry(seq, tokens, len(held), takes, GREEDY))
            held.extend(tokens)
        picked = iter(self._backend.decode(entries))
        return {entry.seq: int(next(picked)) for entry in entries if entry.sample}

    def memory_bytes(self, kv_cache_type: str) -> int:
        return self._backend.memory_bytes(kv_cache_type)

    def close(self) -> None:
        self._backend.close()
