"""Speculative decoding's model-free half: proposals found in a generation's own tokens (prompt
lookup) and the rule that decides how much of a proposal the model's own picks confirm.

Agents rewrite and edit text they were given, so most of an answer is often in its prompt: when
the answer's last few tokens (an n-gram) occurred earlier in the prompt or the answer, the tokens
that followed them there are a likely continuation. An engine feeds such a draft to the model in
the same forward pass as the last sampled token, with logits at every position, then samples
each position in turn exactly as it would without speculation; it keeps the draft while the
sampled token equals the drafted one. The first token that differs is itself a correct sample
(from the logits after the accepted tokens), so a pass yields between 1 and 1 + len(draft)
tokens and the tokens are the ones plain decoding would give.

For a draft that is a fixed function of the tokens so far (prompt lookup, or a draft model's
greedy continuation: never a draft model's random sample) this *is* the standard speculative
sampling rule: accepting draft token t with probability p(t) and otherwise sampling from p with t
removed is the same as sampling from p and keeping t when the sample is t. So sampled output has
the distribution of plain sampling, and with the same seed, the same tokens.

Standard library only: engines call it on their per-token path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from llmflow.media.prompt import is_image_id

#: the n-gram sizes looked up, longest first (llama.cpp's prompt lookup uses 1..4; a single
#: token matches too often in ordinary text to be worth a verification)
NGRAM_MIN, NGRAM_MAX = 2, 4
#: draft tokens per pass at most
DRAFT_MAX = 8


@dataclass(frozen=True, slots=True)
class Speculation:
    """How an engine speculates: draft lengths and the n-gram sizes looked up."""

    draft_max: int = DRAFT_MAX
    ngram_min: int = NGRAM_MIN
    ngram_max: int = NGRAM_MAX

    def __post_init__(self) -> None:
        if self.draft_max < 1:
            raise ValueError("draft_max must be at least 1")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError("n-gram sizes must satisfy 1 <= ngram_min <= ngram_max")

    def lookup(self, tokens: Iterable[int] = ()) -> PromptLookup:
        return PromptLookup(tokens, ngram_min=self.ngram_min, ngram_max=self.ngram_max)


class Proposer(Protocol):
    """Where one generation's drafts come from: told each token as it is taken (`append`), asked
    for up to `k` likely next tokens (`propose`)."""

    def append(self, token: int) -> None: ...

    def propose(self, k: int) -> list[int]: ...


class PromptLookup:
    """The n-grams of one generation's tokens (prompt and answer so far), each with where it last
    occurred followed by another token; `propose` continues the tokens' last n-gram from there.

    `append` is O(ngram sizes); `propose` is a dictionary look-up per n-gram size."""

    __slots__ = ("_tokens", "_last", "_sizes")

    def __init__(self, tokens: Iterable[int] = (), *, ngram_min: int = NGRAM_MIN, ngram_max: int = NGRAM_MAX):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError("n-gram sizes must satisfy 1 <= ngram_min <= ngram_max")
        self._tokens: list[int] = []
        #: n-gram -> index of the token that followed its latest occurrence
        self._last: dict[tuple[int, ...], int] = {}
        self._sizes = range(ngram_max, ngram_min - 1, -1)
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def append(self, token: int) -> None:
        tokens, last = self._tokens, self._last
        end = len(tokens)
        for n in self._sizes:
            if n <= end:
                last[tuple(tokens[end - n : end])] = end  # the n-gram ending before `token`
        tokens.append(int(token))

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.append(token)

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the tokens' last
        n-gram (the longest size that occurred); [] when none did."""
        tokens = self._tokens
        if k <= 0:
            return []
        for n in self._sizes:
            if n > len(tokens):
                continue
            follower = self._last.get(tuple(tokens[-n:]))
            if follower is not None:
                draft = tokens[follower : follower + k]
                # an image's positions (negative ids) are no token a pass could verify
                return (
                    draft
                    if min(draft) >= 0
                    else draft[: next(i for i, t in enumerate(draft) if is_image_id(t))]
                )
        return []


def accepted_prefix(draft: Sequence[int], picks: Sequence[int]) -> int:
    """How many leading draft tokens the model's own picks confirm: `picks[i]` is the token taken
    after the tokens before `draft[i]` (so only the first mismatch matters)."""
    n = 0
    for drafted, picked in zip(draft, picks, strict=False):
        if drafted != picked:
            break
        n += 1
    return n


class DraftLength:
    """How long the next draft may be, per generation: a draft that was taken whole earns a longer
    one (+2), a rejected one a shorter one (what was accepted, plus one), as Hugging Face's
    assisted generation schedules it. A continuation that stopped matching (the answer left the
    text it was copying) so costs little, and a long copy soon runs at the full length."""

    __slots__ = ("current", "maximum")

    def __init__(self, maximum: int, start: int | None = None):
        self.maximum = maximum
        self.current = min(maximum, start if start is not None else maximum)

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted >= drafted:
            self.current = min(self.maximum, self.current + 2)
        else:
            self.current = max(1, min(self.current, accepted + 1))


class SpeculationCounts:
    """Draft tokens proposed and accepted, summed over an engine's generations (its metrics).
    Written by the one thread that decodes."""

    __slots__ = ("proposed", "accepted")

    def __init__(self) -> None:
        self.proposed = 0
        self.accepted = 0

    def add(self, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted


class SequenceDrafter(Protocol):
    """A draft model drafting for many sequences together (a batching engine's): for each sequence
    id, the greedy continuation of its tokens, `k` tokens long at most."""

    def continue_greedily(self, wants: Mapping[int, tuple[Sequence[int], int]]) -> dict[int, list[int]]: ...


class Drafts:
    """Drafts for many generations at once (a batching scheduler): each generation's
    `DraftLength`, and its `PromptLookup` kept in step with its tokens, by a key of the caller's.
    With a draft `model`, text-only generations are drafted by it, all in the same passes;
    generations with images (which a draft model cannot read) by prompt lookup."""

    __slots__ = ("_speculation", "_model", "_state")

    def __init__(self, speculation: Speculation, model: SequenceDrafter | None = None):
        self._speculation = speculation
        self._model = model
        self._state: dict[object, _Drafting] = {}

    def length(self, key: object) -> int:
        """How long the generation `key`'s next draft may be."""
        state = self._state.get(key)
        return state.length.current if state is not None else self._speculation.draft_max

    def propose(self, wants: Iterable[Want]) -> dict[object, list[int]]:
        """The next draft of each generation wanted (`Want`), at most as long as its `length`."""
        drafts: dict[object, list[int]] = {}
        for_model: dict[int, tuple[Sequence[int], int]] = {}
        keys: dict[int, object] = {}
        for want in wants:
            state = self._state.get(want.key)
            if state is None:
                state = self._state[want.key] = _Drafting(DraftLength(self._speculation.draft_max))
            k = min(want.most, state.length.current)
            if self._model is not None and want.text_only:
                for_model[want.seq], keys[want.seq] = (want.tokens, k), want.key
                continue
            if state.lookup is None:
                state.lookup = self._speculation.lookup()
            state.lookup.extend(want.tokens[len(state.lookup) :])
            drafts[want.key] = state.lookup.propose(k)
        if for_model:
            assert self._model is not None
            made = self._model.continue_greedily(for_model)
            for seq, key in keys.items():
                drafts[key] = made.get(seq, [])
        return drafts

    def record(self, key: object, drafted: int, accepted: int) -> None:
        state = self._state.get(key)
        if state is not None:
            state.length.update(drafted, accepted)

    def keep_only(self, keys: Iterable[object]) -> None:
        """Forget the generations not in `keys` (ended)."""
        alive = set(keys)
        for key in [k for k in self._state if k not in alive]:
            del self._state[key]


@dataclass(frozen=True, slots=True)
class Want:
    """One generation's wish for a draft: its key, its sequence id (a draft model's sequence), its
    tokens (prompt and answer), the draft's length at most, and whether its tokens are text alone."""

    key: object
    seq: int
    tokens: Sequence[int]
    most: int
    text_only: bool = True


class _Drafting:
    """One generation's draft length and, once it drafts by prompt lookup, its n-grams."""

    __slots__ = ("length", "lookup")

    def __init__(self, length: DraftLength):
        self.length = length
        self.lookup: PromptLookup | None = None
