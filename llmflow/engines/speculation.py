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

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Protocol

from llmflow.media.prompt import is_image_id

#: the n-gram sizes looked up, longest first (llama.cpp's prompt lookup uses 1..4; a single
#: token matches too often in ordinary text to be worth a verification)
NGRAM_MIN, NGRAM_MAX = 2, 4
#: draft tokens per pass at most (`plan_lengths` picks fewer where they do not pay)
DRAFT_MAX = 32
#: the acceptance rate's prior, in confirmed and rejected draft tokens, and how much of what was
#: seen still counts after one more trial (a verified draft token), and after one more pass
PRIOR_CONFIRMED, PRIOR_REJECTED, TRIAL_FADE, PASS_FADE = 3.0, 1.0, 0.97, 0.97
#: the prior of drafts that continue a copy in progress (`Acceptances`), confirmed and rejected
PRIOR_COPYING = (9.0, 1.0)
#: weight of a new pass in its width band's moving average; passes after which a band unseen is
#: forgotten; the assumed cost of a token beyond the widest measured pass, per its cost per token
COST_WEIGHT, STALE_PASSES, UNTRIED_SLOPE = 0.2, 2048, 0.25
#: a draft token less likely than this to be taken is never verified
UNLIKELY = 0.02
#: drafts must promise this much more than a pass without them (expected tokens per second):
#: pass costs and acceptance rates are estimates, and where drafts barely pay (a CPU whose pass
#: costs about its width) their noise alone would otherwise make the planner draft at a loss
GAIN_MARGIN = 0.1


@dataclass(frozen=True, slots=True)
class Speculation:
    """How an engine speculates: draft lengths and the n-gram sizes looked up."""

    draft_max: int = DRAFT_MAX
    ngram_min: int = NGRAM_MIN
    ngram_max: int = NGRAM_MAX
    #: draft tokens per pass at least whenever a draft is found (0: only as many as pay)
    draft_min: int = 0

    def __post_init__(self) -> None:
        if self.draft_max < 1:
            raise ValueError("draft_max must be at least 1")
        if not 0 <= self.draft_min <= self.draft_max:
            raise ValueError("draft_min must satisfy 0 <= draft_min <= draft_max")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError("n-gram sizes must satisfy 1 <= ngram_min <= ngram_max")

    def lookup(self, tokens: Iterable[int] = ()) -> PromptLookup:
        return PromptLookup(tokens, ngram_min=self.ngram_min, ngram_max=self.ngram_max)


class Proposer(Protocol):
    """Where one generation's drafts come from: told each token as it is taken (`append`), asked
    for up to `k` likely next tokens (`propose`); `continues`: whether the last proposal picks up
    a copy in progress (prompt lookup; a draft model's never do)."""

    continues: bool

    def append(self, token: int) -> None: ...

    def propose(self, k: int) -> list[int]: ...


class PromptLookup:
    """The n-grams of one generation's tokens (prompt and answer so far), each with where it last
    occurred followed by another token; `propose` continues the tokens' last n-gram from there.

    `continues` says whether the last proposal picks up where the one before it left off, the
    tokens taken since being the ones that followed there: the answer is copying a span, and
    keeps to it.

    `append` is O(ngram sizes); `propose` is a dictionary look-up per n-gram size."""

    __slots__ = ("_tokens", "_last", "_sizes", "_followed", "continues")

    def __init__(self, tokens: Iterable[int] = (), *, ngram_min: int = NGRAM_MIN, ngram_max: int = NGRAM_MAX):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError("n-gram sizes must satisfy 1 <= ngram_min <= ngram_max")
        self._tokens: list[int] = []
        #: n-gram -> index of the token that followed its latest occurrence
        self._last: dict[tuple[int, ...], int] = {}
        self._sizes = range(ngram_max, ngram_min - 1, -1)
        #: where the last proposal came from, and the tokens' count then
        self._followed: tuple[int, int] | None = None
        self.continues = False
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

    def _picks_up(self, follower: int) -> bool:
        """Whether a proposal from `follower` continues the last one: the tokens taken since are
        the ones that followed its source, and `follower` comes right after them."""
        if self._followed is None:
            return False
        source, then = self._followed
        tokens = self._tokens
        taken = len(tokens) - then
        return taken > 0 and follower == source + taken and tokens[source:follower] == tokens[then:]

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
                self.continues = self._picks_up(follower)
                self._followed = (follower, len(tokens))
                draft = tokens[follower : follower + k]
                # an image's positions (negative ids) are no token a pass could verify
                return (
                    draft
                    if min(draft) >= 0
                    else draft[: next(i for i, t in enumerate(draft) if is_image_id(t))]
                )
        self._followed, self.continues = None, False
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


class Acceptance:
    """How likely one generation's next draft token is to be confirmed, given that the draft
    tokens before it were: each verified draft token is a trial that is either confirmed or ends
    the run, so the rate is confirmed tokens over confirmed tokens plus rejections, begun from a
    prior (`PRIOR_CONFIRMED`, `PRIOR_REJECTED`).

    What was seen fades by `TRIAL_FADE` per newer trial, so the rate speaks of about the last
    1 / (1 - TRIAL_FADE) trials, however long the drafts were: a generation copying its prompt
    earns long drafts even from short ones, and one that leaves the text it copied loses them
    within a few rejected drafts. It also fades by `PASS_FADE` per pass, so a generation that
    stopped drafting is tried again."""

    __slots__ = ("confirmed", "rejected", "_prior")

    def __init__(self, prior: tuple[float, float] = (PRIOR_CONFIRMED, PRIOR_REJECTED)) -> None:
        self.confirmed = 0.0
        self.rejected = 0.0
        self._prior = prior

    @property
    def rate(self) -> float:
        confirmed = self.confirmed + self._prior[0]
        return confirmed / (confirmed + self.rejected + self._prior[1])

    def fade(self) -> None:
        """One more pass."""
        self.confirmed *= PASS_FADE
        self.rejected *= PASS_FADE

    def add(self, drafted: int, confirmed: int) -> None:
        """A verified draft of `drafted` tokens of which the first `confirmed` were taken."""
        rejected = confirmed < drafted
        older = TRIAL_FADE ** (confirmed + rejected)
        self.confirmed = self.confirmed * older + confirmed
        self.rejected = self.rejected * older + rejected


class Acceptances:
    """One generation's acceptance of two kinds of draft, learned apart: those that continue a copy
    in progress (`PromptLookup.continues`) and fresh ones. They differ greatly: on the embedded
    model's rewrite answers, 8-token proposals that continued a copy had about 7 tokens confirmed
    on average, fresh ones about 2. One rate for both drafts too long after a fresh match and too
    short inside a copy; apart, the planner drafts long only while the answer copies."""

    __slots__ = ("fresh", "copying")

    def __init__(self) -> None:
        self.fresh = Acceptance()
        self.copying = Acceptance(PRIOR_COPYING)

    def fade(self) -> None:
        """One more pass."""
        self.fresh.fade()
        self.copying.fade()

    def of(self, continues: bool) -> Acceptance:
        """The acceptance of a draft that does (True) or does not continue a copy."""
        return self.copying if continues else self.fresh


class Shadow:
    """A prompt-lookup proposal the planner declined, held against the tokens the generation then
    takes: each is the trial that verifying the proposal would have been (confirmed while they
    agree, rejected at the first that differs), and counts in the generation's `Acceptance` as
    one. Without it a generation whose prior rate does not pay would never draft, and so never
    learn that it copies its prompt; a look-up costs nothing, so learning this way is free. Exact
    for sampled answers too: verification confirms a draft token when the sample equals it."""

    __slots__ = ("_proposal", "_seen", "_acceptance")

    def __init__(self) -> None:
        self._proposal: Sequence[int] = ()
        self._seen = 0
        self._acceptance: Acceptance | None = None

    @property
    def active(self) -> bool:
        """Tokens of the proposal are still to be compared."""
        return self._seen < len(self._proposal)

    def hold(self, proposal: Sequence[int], acceptance: Acceptance) -> None:
        """Compare `proposal` with the next tokens taken, as trials of `acceptance` (the one a
        draft of it would have been judged by)."""
        self._proposal, self._seen, self._acceptance = proposal, 0, acceptance

    def drop(self) -> None:
        """The generation drafts again: its verified drafts are its trials."""
        self._proposal, self._seen = (), 0

    def see(self, token: int) -> None:
        """The generation took `token`."""
        acceptance = self._acceptance
        if self._seen >= len(self._proposal) or acceptance is None:
            return
        confirmed = token == self._proposal[self._seen]
        acceptance.add(1, int(confirmed))
        self._seen = self._seen + 1 if confirmed else len(self._proposal)


class PassCost:
    """What a forward pass of `width` tokens (each with logits) costs, learned from the engine's
    own passes: per band of widths (powers of two), a moving average of the width and the
    seconds, with straight lines between the bands' points (`curve`).

    Verifying a draft is not free: on a CPU a pass of k tokens costs about k one-token passes,
    on a GPU's quantized kernels a 9-token pass about 2 to 3 (docs/engines.md). So the planner
    needs the engine's own figures. A width up to twice the widest measured one is assumed cheap
    (each further token a quarter of the widest pass's cost per token), so it is tried once and
    its cost learned; wider ones cost in proportion to that, so that passes are tried wider step
    by step, never far beyond what was measured (one wide pass where every token costs its share
    is dear). A band not seen for `STALE_PASSES` passes is forgotten and so tried again (costs
    move with the context's length and the machine's load)."""

    __slots__ = ("_bands", "_passes")

    def __init__(self) -> None:
        #: band (the width's bit length) -> [mean width, mean seconds, the pass last seen]
        self._bands: dict[int, list[float]] = {}
        self._passes = 0

    def observe(self, width: int, seconds: float) -> None:
        """A pass of `width` tokens took `seconds`."""
        self._passes += 1
        band = self._bands.get(width.bit_length())
        if band is None:
            self._bands[width.bit_length()] = [float(width), seconds, self._passes]
            return
        band[0] += COST_WEIGHT * (width - band[0])
        band[1] += COST_WEIGHT * (seconds - band[1])
        band[2] = self._passes

    def curve(self) -> Callable[[int], float]:
        """The estimated seconds of a pass by width, as now measured (for one step's planning).
        Below the narrowest point a token costs what it costs there; before any pass, a token
        costs 1 and each further one a quarter of it."""
        fresh = self._passes - STALE_PASSES
        points = sorted((w, s) for w, s, seen in self._bands.values() if seen > fresh and s > 0)
        if not points:
            points = [(1.0, 1.0)]
        widths = [w for w, _ in points]
        widest, most = points[-1]
        slope_beyond = UNTRIED_SLOPE * most / widest
        #: per token beyond twice the widest: the share of a token in the optimistic guess there
        share_far = (most + slope_beyond * widest) / (2 * widest)

        def estimate(width: int) -> float:
            i = bisect_left(widths, width)
            if i == len(points):
                if width > 2 * widest:
                    return share_far * width
                return most + slope_beyond * (width - widest)
            w1, s1 = points[i]
            if i == 0:
                return s1 * width / w1
            w0, s0 = points[i - 1]
            return s0 + (s1 - s0) * (width - w0) / (w1 - w0)

        return estimate


def plan_lengths(
    decoding: int,
    offers: Sequence[tuple[float, int]],
    cost: Callable[[int], float],
    room: int,
    least: int = 0,
) -> list[int]:
    """How many draft tokens each offer (its acceptance rate, its tokens at most) verifies in a
    pass beside `decoding` one-token entries, for the most tokens per second, at most `room` in
    all. The j-th draft token of an offer of rate a is taken with probability a**j, so a pass is
    expected to yield `decoding` plus the sum of those over the drafted tokens, in the time
    `cost(width)`. Draft tokens join most likely first; the count with the best expected tokens
    per second wins (every count is tried: a pass's cost may jump between two widths), if it
    beats no drafts by `GAIN_MARGIN`. Each offer then drafts at least `least` tokens (`draft_min`)
    where it has them and the room holds them."""
    lengths = [0] * len(offers)
    heap = [(-rate, i, 1) for i, (rate, most) in enumerate(offers) if most > 0 and rate > 0]
    heapify(heap)
    expected, width = float(decoding), decoding
    best = (1 + GAIN_MARGIN) * expected / cost(width) if width else 0.0
    order: list[int] = []
    chosen = 0
    while heap and len(order) < room:
        p, i, j = heappop(heap)
        if -p < UNLIKELY:
            break
        expected -= p
        width += 1
        order.append(i)
        rate = expected / cost(width)
        if rate > best:
            best, chosen = rate, len(order)
        a, most = offers[i]
        if j < most:
            heappush(heap, (p * a, i, j + 1))
    for i in order[:chosen]:
        lengths[i] += 1
    if least:
        left = room - chosen
        for i, (_, most) in enumerate(offers):
            more = max(0, min(min(least, most) - lengths[i], left))
            lengths[i] += more
            left -= more
    return lengths


def plan_equal_length(
    decoding: int,
    offers: Sequence[tuple[float, int]],
    cost: Callable[[int], float],
    room: int,
    least: int = 0,
) -> int:
    """One draft length for every offer (its acceptance rate, its tokens at most), for the most
    expected tokens per second of a pass beside `decoding` one-token entries, `room` draft tokens
    at most in all. An offer shorter than the length is padded (`Drafts`): its padding costs
    width and is expected to yield nothing. The j-th draft token of an offer of rate a is taken
    with probability a**j, as in `plan_lengths` (and, as there, only beyond `GAIN_MARGIN`; at
    least `least` where any offer has a token and the room holds it)."""
    n = len(offers)
    longest = min(max((most for rate, most in offers if rate > 0), default=0), room // n if n else 0)
    expected, chosen = float(decoding), 0
    best = (1 + GAIN_MARGIN) * decoding / cost(decoding) if decoding else 0.0
    taken = [1.0] * n
    for length in range(1, longest + 1):
        for i, (rate, most) in enumerate(offers):
            if length <= most:
                taken[i] *= rate
                expected += taken[i]
        rate = expected / cost(decoding + n * length)
        if rate > best:
            best, chosen = rate, length
    if least and any(most for _, most in offers):
        chosen = max(chosen, min(least, room // n))
    return chosen


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
    `Acceptances`, and its `PromptLookup` kept in step with its tokens, by a key of the caller's;
    the engine's `PassCost`, from which `plan_lengths` sizes each step's drafts. With a draft
    `model`, text-only generations are drafted by it, all in the same passes; generations with
    images (which a draft model cannot read) by prompt lookup. A prompt-lookup proposal the
    planner declines is held against the tokens taken next (`Shadow`).

    `equal`: every draft of a step has one length (`plan_equal_length`), a shorter proposal
    padded with its last token. With a KV stream per sequence, llama.cpp computes a pass in
    micro-batches that take the same number of tokens from each sequence: drafts of different
    lengths would cost a micro-batch per length, each about a whole pass on a GPU, which the
    width alone (what `PassCost` knows) does not tell. A padding token is a fixed function of the
    tokens, so the acceptance rule stays exact; it is verified like any draft token but neither
    counted as proposed nor held against the generation's acceptance."""

    __slots__ = ("_speculation", "_model", "_state", "_equal", "cost")

    def __init__(
        self, speculation: Speculation, model: SequenceDrafter | None = None, *, equal: bool = False
    ):
        self._speculation = speculation
        self._model = model
        self._state: dict[object, _Drafting] = {}
        self._equal = equal
        self.cost = PassCost()

    def propose(self, wants: Sequence[Want], decoding: int, room: int) -> dict[object, list[int]]:
        """The next draft of each generation wanted (`Want`), sized for a pass beside `decoding`
        one-token entries, `room` draft tokens at most in all. Prompt lookup offers its tokens
        first (a look-up costs nothing); a draft model is asked for the planned lengths only."""
        offered: list[list[int] | None] = []
        offers: list[tuple[float, int]] = []
        states: list[_Drafting] = []
        for want in wants:
            state = self._state.get(want.key)
            if state is None:
                state = self._state[want.key] = _Drafting()
            states.append(state)
            state.acceptances.fade()
            most = min(want.most, self._speculation.draft_max)
            if self._model is not None and want.text_only:
                state.current = state.acceptances.fresh
                offered.append(None)
                offers.append((state.current.rate, most))
                continue
            if state.lookup is None:
                state.lookup = self._speculation.lookup()
            new = want.tokens[len(state.lookup) :]
            if state.shadow.active:
                for token in new:
                    state.shadow.see(token)
            state.lookup.extend(new)
            tokens = state.lookup.propose(most)
            state.current = state.acceptances.of(state.lookup.continues)
            offered.append(tokens)
            offers.append((state.current.rate, len(tokens)))
        least = self._speculation.draft_min
        if self._equal:
            length = plan_equal_length(decoding, offers, self.cost.curve(), room, least)
            lengths = [min(length, want.most) for want in wants]
        else:
            lengths = plan_lengths(decoding, offers, self.cost.curve(), room, least)
        drafts: dict[object, list[int]] = {}
        for_model: dict[int, tuple[Sequence[int], int]] = {}
        keys: dict[int, object] = {}
        for want, tokens, k in zip(wants, offered, lengths, strict=True):
            if k == 0:
                continue
            if tokens is not None:
                drafts[want.key] = tokens[:k]
            else:
                for_model[want.seq], keys[want.seq] = (want.tokens, k), want.key
        if for_model:
            assert self._model is not None
            made = self._model.continue_greedily(for_model)
            for seq, key in keys.items():
                drafts[key] = made.get(seq, [])
        for want, state, tokens, k in zip(wants, states, offered, lengths, strict=True):
            if k == 0:
                if tokens and not state.shadow.active:
                    state.shadow.hold(tokens, state.current)
                continue
            state.shadow.drop()
            draft = drafts.get(want.key, [])
            state.proposed = len(draft)
            if self._equal and len(draft) < k:
                drafts[want.key] = draft + [draft[-1] if draft else want.tokens[-1]] * (k - len(draft))
        return drafts

    def record(self, key: object, drafted: int, confirmed: int) -> tuple[int, int]:
        """A verified draft of `drafted` tokens, the first `confirmed` taken; returns the proposed
        tokens among them and how many of those were taken (padding left out)."""
        state = self._state.get(key)
        if state is None:
            return drafted, confirmed
        proposed = min(drafted, state.proposed)
        taken = min(confirmed, proposed)
        if proposed:
            state.current.add(proposed, taken)
        return proposed, taken

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
    """One generation's acceptances (`current`: the one its last draft is judged by), the
    proposed tokens of its last draft (without padding) and, once it drafts by prompt lookup, its
    n-grams and the `Shadow` of a proposal declined."""

    __slots__ = ("acceptances", "current", "proposed", "lookup", "shadow")

    def __init__(self) -> None:
        self.acceptances = Acceptances()
        self.current = self.acceptances.fresh
        self.proposed = 0
        self.lookup: PromptLookup | None = None
        self.shadow = Shadow()
