"""The one-at-a-time llama.cpp engine's decode loop: each forward pass feeds the last sampled
token and, with speculation, a draft of the tokens likely to follow (`engines/speculation.py`),
with logits at every position; the positions are sampled in turn, as plain decoding would sample
them, and the draft is kept while the samples confirm it. Tokens still leave one at a time.

The `Llama` object's record of its context (`input_ids[:n_tokens]`) stays true to its KV cache:
a rejected draft's cells hold the drafted tokens' real states, so what the context holds is
always a token sequence with its own cache, which the next request's prefix reuse reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from llmflow.constraints.matcher import TokenMatcher
from llmflow.engines.base import TokenRequest
from llmflow.engines.llama_cpp_media import Projector
from llmflow.engines.logprobs import scored
from llmflow.engines.speculation import (
    Acceptances,
    PassCost,
    Proposer,
    Shadow,
    Speculation,
    SpeculationCounts,
    plan_lengths,
)
from llmflow.errors import EngineFailed, InvalidRequest
from llmflow.media.prompt import media_images
from llmflow.params import SamplingParams

#: llama.cpp's seed value that asks for a random seed
RANDOM_SEED = 0xFFFFFFFF
#: what llama.cpp's Llama class uses for repetition penalties
PENALTY_LAST_N = 64
#: the "sampler" of a greedy request without penalties: the argmax of its logits
GREEDY = "greedy"


def sampler_chain(lib: Any, n_vocab: int, params: SamplingParams) -> Any:
    """A sampler chain in the order of llama-cpp-python's `Llama`, so that both llama.cpp
    engines sample the same tokens for the same seed; `GREEDY` for a plain argmax."""
    if params.greedy and params.repetition_penalty == 1.0:
        return GREEDY
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    add = lib.llama_sampler_chain_add
    if params.repetition_penalty != 1.0:
        add(
            chain,
            lib.llama_sampler_init_penalties(n_vocab, PENALTY_LAST_N, params.repetition_penalty, 0.0, 0.0),
        )
    if params.greedy:
        add(chain, lib.llama_sampler_init_greedy())
        return chain
    add(chain, lib.llama_sampler_init_top_k(params.top_k))
    add(chain, lib.llama_sampler_init_top_p(params.top_p, 1))
    add(chain, lib.llama_sampler_init_min_p(params.min_p, 1))
    add(chain, lib.llama_sampler_init_temp(params.temperature))
    add(chain, lib.llama_sampler_init_dist(params.seed if params.seed is not None else RANDOM_SEED))
    return chain


def free_sampler(lib: Any, sampler: Any) -> None:
    if sampler is not None and sampler is not GREEDY:
        lib.llama_sampler_free(sampler)


class ContextSteps:
    """Forward passes in a `Llama`'s context (sequence 0) and the samples taken from them."""

    def __init__(self, lib: Any, llama: Any, n_vocab: int, projector: Projector | None = None):
        self._lib = lib
        self._projector = projector
        self._llama = llama
        self._ctx = llama.ctx
        self._memory = lib.llama_get_memory(llama.ctx)
        self._n_vocab = n_vocab
        self.n_batch = llama.n_batch
        self._batch = lib.llama_batch_init(self.n_batch, 0, 1)
        for i in range(self.n_batch):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0

    def feed(self, tokens: Sequence[int], rows: int) -> None:
        """Put `tokens` into the context after what it holds, with logits for the last `rows`
        (at most `n_batch`) of them."""
        llama, batch = self._llama, self._batch
        start = llama.n_tokens
        first_row = len(tokens) - rows
        for offset in range(0, len(tokens), self.n_batch):
            chunk = tokens[offset : offset + self.n_batch]
            for j, t in enumerate(chunk):
                batch.token[j] = t
                batch.pos[j] = start + offset + j
                batch.logits[j] = offset + j >= first_row
            batch.n_tokens = len(chunk)
            status = self._lib.llama_decode(self._ctx, batch)
            if status != 0:
                raise EngineFailed(f"llama_decode failed with status {status} on {len(chunk)} tokens")
            end = start + offset + len(chunk)
            llama.input_ids[start + offset : end] = chunk
            llama.n_tokens = end

    def synchronize(self) -> None:
        """Wait for the last pass to finish (a GPU's run asynchronously)."""
        self._lib.llama_synchronize(self._ctx)

    def prefill(self, prompt: Sequence[int]) -> list[int]:
        """Evaluate `prompt`'s images, and the text before each, after what the context holds;
        the text after the last image, which the decode loop feeds with its first pass."""
        start = self.n_tokens
        for span in media_images(prompt):
            if span.end <= start:
                continue
            assert self._projector is not None, "a prompt with images comes only from a projector"
            if span.start > start:
                self.feed(prompt[start : span.start], rows=0)
            self._projector.decode(self._ctx, span, self._projector.encode(span), 0, self.n_batch)
            self._llama.input_ids[span.start : span.end] = prompt[span.start : span.end]
            self._llama.n_tokens = start = span.end
        rest = list(prompt[start:])
        if not rest:
            raise InvalidRequest.single("messages", "a prompt may not end with an image")
        return rest

    @property
    def n_tokens(self) -> int:
        """Positions the context holds (`Llama.reset` sets it to 0 and leaves the cells)."""
        return int(self._llama.n_tokens)

    def rewind(self, n: int) -> None:
        """Forget what the context holds from position `n` on."""
        self._lib.llama_memory_seq_rm(self._memory, 0, n, -1)
        self._llama.n_tokens = n

    def logits(self, row: int) -> np.ndarray:
        """Row `row` (negative: from the last) of the last pass's logits, a view."""
        pointer = self._lib.llama_get_logits_ith(self._ctx, row)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))

    def pick(self, row: int, sampler: Any, constraint: TokenMatcher | None, top: int | None) -> int:
        """The token sampled from row `row`, masked by `constraint` (in place: the sampler chain
        reads llama.cpp's own logits), scored from the raw row when `top` is set."""
        logits = self.logits(row)
        raw = logits.copy() if top is not None and constraint is not None else logits
        if sampler is GREEDY:
            if constraint is not None:
                constraint.mask_for_argmax(logits)
            token = int(logits.argmax())
        else:
            if constraint is not None:
                constraint.mask(logits)
            token = int(self._lib.llama_sampler_sample(sampler, self._ctx, row))
        return token if top is None else scored(token, raw, top)

    def close(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None


def generate(
    steps: ContextSteps,
    request: TokenRequest,
    sampler: Any,
    speculation: Speculation | None,
    counts: SpeculationCounts | None = None,
    drafter: Callable[[Sequence[int]], Proposer] | None = None,
    cost: PassCost | None = None,
) -> Iterator[int]:
    """Tokens of `request` after the context's kept prefix of its prompt (`n_tokens` of them):
    at most `request.limit`, checking `request.cancel` between two. With `speculation`, each pass
    also verifies a draft: from `drafter(prompt)` (a draft model) when given, else prompt lookup,
    as long as the engine's pass `cost` (learned here from each decoding pass) says it pays."""
    constraint, top, limit, cancel = (
        request.constraint,
        request.params.logprobs,
        request.limit,
        request.cancel,
    )
    prompt, report = request.prompt_ids, request.reuse
    drafting: _Drafting | None = None
    if speculation is not None:
        lookup = drafter(prompt) if drafter is not None else speculation.lookup(prompt)
        drafting = _Drafting(lookup, speculation, cost if cost is not None else PassCost(), drafter is None)
    feed: list[int] = steps.prefill(prompt)  # after the prefix the engine kept, and any images
    n_past = steps.n_tokens
    draft: list[int] = []
    produced = 0
    while True:
        steps.rewind(n_past)
        started = time.perf_counter()
        steps.feed(feed + draft, rows=1 + len(draft))
        if drafting is not None and len(feed) == 1:
            steps.synchronize()
            drafting.cost.observe(1 + len(draft), time.perf_counter() - started)
        n_past += len(feed)
        if draft:  # counted now: the consumer may stop inside the run
            if counts is not None:
                counts.add(len(draft), 0)
            if report is not None:
                report.add_drafts(len(draft), 0)
        taken = 0
        for j in range(len(draft) + 1):
            token = steps.pick(j - len(draft) - 1, sampler, constraint, top)
            produced += 1
            if constraint is not None:
                constraint.advance(token)  # before the next position is masked
            if drafting is not None:
                drafting.take(token)
            confirmed = j < len(draft) and token == draft[j]
            yield token
            if produced >= limit or cancel.cancelled:
                return
            if not confirmed:
                break
            taken += 1
            n_past += 1  # the drafted token's cell holds the answer's token
            if counts is not None:
                counts.add(0, 1)
            if report is not None:
                report.add_drafts(0, 1)
        feed = [int(token)]
        if drafting is None:
            continue
        if draft:
            drafting.current.add(len(draft), taken)
        draft = drafting.next(constraint, steps.n_batch - 1, limit - produced - 1)


class _Drafting:
    """One generation's drafts in the one-at-a-time loop: its proposer, its acceptances (`current`:
    the one its last draft is judged by), the engine's pass cost and, when proposals cost nothing
    (prompt lookup), the `Shadow` of a proposal the planner declined."""

    __slots__ = ("lookup", "speculation", "cost", "acceptances", "current", "shadow")

    def __init__(self, lookup: Proposer, speculation: Speculation, cost: PassCost, free: bool):
        self.lookup = lookup
        self.speculation = speculation
        self.cost = cost
        self.acceptances = Acceptances()
        self.current = self.acceptances.fresh
        self.shadow = Shadow() if free else None

    def take(self, token: int) -> None:
        """The generation took `token`."""
        self.lookup.append(token)
        if self.shadow is not None:
            self.shadow.see(token)

    def next(self, constraint: TokenMatcher | None, room: int, left: int) -> list[int]:
        """The next draft: as long as `plan_lengths` finds worth a pass, within the batch and
        the tokens left, cut before the first token an output constraint refuses (verifying a
        token that could never be sampled is wasted work). A look-up costs nothing, so its
        proposal comes first and the planner sizes it by its own length and kind; a draft
        model's costs its passes, so it is asked for the planned length only."""
        self.acceptances.fade()
        most = min(self.speculation.draft_max, room, left)
        if most <= 0:
            return []
        shadow, least = self.shadow, self.speculation.draft_min
        if shadow is None:
            self.current = self.acceptances.fresh
            k = plan_lengths(1, [(self.current.rate, most)], self.cost.curve(), most, least)[0]
            draft = self.lookup.propose(k) if k else []
        else:
            proposal = self.lookup.propose(most)
            self.current = self.acceptances.of(self.lookup.continues)
            k = plan_lengths(1, [(self.current.rate, len(proposal))], self.cost.curve(), most, least)[0]
            if k == 0:
                # not cut by the constraint: a refused token is never sampled, so it simply ends
                # the comparison, and the grammar is not walked for a proposal no pass verifies
                if proposal and not shadow.active:
                    shadow.hold(proposal, self.current)
                return []
            shadow.drop()
            draft = proposal[:k]
        if constraint is not None and draft:
            draft = draft[: constraint.allowed_prefix(draft)]
        return draft
