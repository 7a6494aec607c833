"""Continuous batching without a model: which request holds which sequence, which tokens go into
the next batched forward pass, and how each sampled token reaches its request's consumer.

One scheduler thread runs every step for all requests. Each request's tokens go to its own
mailbox, and the consumers that wait are woken once per forward pass (`handoff`): a thread, or a
generation on the server's event loop, so a slow consumer never holds back the others and no
thread is needed per stream. Requests join and leave between two steps. The model work (a
forward pass over a batch, the samplers, KV-cache moves) is a `StepBackend`: `llama_cpp_batched`
is the real one; tests drive a scripted one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from llmflow.constraints.matcher import TokenMatcher
from llmflow.engines.base import OPENING_WAIT_S, TokenRequest, next_turn_tokens
from llmflow.engines.handoff import Mailbox, wait_taken, wake
from llmflow.engines.lora import AdapterKey, adapter_key
from llmflow.engines.prompt_cache import PromptCache, State, common_prefix
from llmflow.engines.speculation import Drafts, SequenceDrafter, Speculation, SpeculationCounts, Want
from llmflow.errors import EngineFailed
from llmflow.media.prompt import PromptImage, media_images
from llmflow.params import SamplingParams
from llmflow.types import CancelToken, PromptReuse

log = logging.getLogger(__name__)

#: the longest the scheduler sleeps while every running request waits for an image's encoding
ENCODING_WAIT_S = 0.05


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One sequence's run of tokens in a step's batch."""

    seq: int
    tokens: Sequence[int]
    #: position of `tokens[0]` in the sequence
    start: int
    #: sample the next token from the logits after the last of `tokens`
    sample: bool
    sampler: Any
    #: with the sampled token, its logprob and this many most likely tokens' (None = off)
    logprobs: int | None = None
    #: the tokens an output constraint allows next (a bool per logit), or None: all of them
    allowed: Any = None
    #: the last len(draft) of `tokens` are a speculative draft: sample after each of them too,
    #: keeping the draft while the samples confirm it (`engines/speculation.py`)
    draft: Sequence[int] = ()
    #: the entry is this image's span (`tokens` its ids): evaluated from its encoded
    #: embeddings, in a pass of its own
    image: PromptImage | None = None


class StepBackend(Protocol):
    """The model side of continuous batching. Called from the scheduler thread only."""

    def decode(self, entries: Sequence[BatchEntry]) -> list[Any]:
        """One forward pass over every entry (sorted by `seq`); returns the token sampled for each
        entry with `sample`, in order, or for an entry with a `draft` the run of tokens taken: the
        draft tokens its samples confirmed, then the first sample that differs (or the one after
        the whole draft). Raises `EngineFailed` when the pass fails."""
        ...

    def new_sampler(self, params: SamplingParams) -> Any: ...

    def free_sampler(self, sampler: Any) -> None: ...

    def copy(self, src: int, dst: int) -> None:
        """Make sequence `dst` hold what `src` holds; `src` keeps it."""
        ...

    def truncate(self, seq: int, keep: int) -> int:
        """Drop the positions of `seq` from `keep` on; returns how many it kept (0 when the model
        cannot drop part of a sequence)."""
        ...

    def set_adapter(self, adapter: AdapterKey) -> None:
        """Compute the next passes with `adapter` (None: the base model). Asked only of a backend
        that serves requests with adapters."""
        ...

    def idle(self) -> None:
        """Nothing runs or waits any more: a chance to give back what only decoding needs."""
        ...

    def save(self, seq: int) -> State | None:
        """Sequence `seq`'s KV state (for the prompt cache), or None."""
        ...

    def restore(self, seq: int, state: State) -> bool:
        """Replace what `seq` holds with a saved state; False (and `seq` empty) when refused."""
        ...

    def encode_image(self, image: PromptImage) -> Future[Any]:
        """Start encoding a prompt's image beside the decode loop (any thread may ask); the
        future's result is what `decode_image` takes. Asked only of a backend whose engine
        reads images."""
        ...

    def decode_image(self, seq: int, image: PromptImage, encoded: Any) -> None:
        """Evaluate an encoded image into sequence `seq` at its span, in a pass of its own."""
        ...


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A snapshot for tests and the server's gauges."""

    parallel: int
    running: int
    waiting: int
    free_sequences: int
    steps: int
    #: tokens that went through the model: prompt tokens plus fed-back generated tokens
    tokens_decoded_total: int
    tokens_generated_total: int
    #: prompt tokens taken from a kept sequence or the prompt cache instead of being computed
    prompt_tokens_reused_total: int = 0
    #: states saved to / restored from the prompt cache
    cache_saves_total: int = 0
    cache_restores_total: int = 0
    #: time the scheduler thread spent saving states (the decode loop waits meanwhile): all, longest
    cache_save_seconds_total: float = 0.0
    cache_save_seconds_max: float = 0.0
    #: speculative draft tokens verified, and those the samples confirmed
    draft_tokens_proposed_total: int = 0
    draft_tokens_accepted_total: int = 0
    #: tokens computed while idle after answers, for their conversations' next turns
    next_turn_tokens_total: int = 0


class Request:
    """One generation: its tokens so far, where they are in the KV cache, its sampler, and the
    mailbox its consumer reads."""

    __slots__ = (
        "adapter",
        "cancel",
        "box",
        "closed",
        "constraint",
        "encodings",
        "fed",
        "generated",
        "images",
        "leader",
        "limit",
        "next_turn_opening",
        "params",
        "prompt_len",
        "reuse",
        "sampler",
        "seq",
        "tokens",
    )

    def __init__(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        limit: int,
        constraint: TokenMatcher | None = None,
        reuse: PromptReuse | None = None,
        next_turn_opening: Sequence[int] = (),
    ):
        self.tokens = list(prompt_ids)
        self.prompt_len = len(self.tokens)
        self.params = params
        self.cancel = cancel
        #: tokens to generate at most
        self.limit = limit
        self.box = Mailbox()
        self.seq = -1
        #: tokens[:fed] are in the sequence's KV cache
        self.fed = 0
        self.generated = 0
        self.sampler: Any = None
        #: set by the consumer's thread when it stops reading
        self.closed = False
        #: another choice of the same prompt, whose computed prompt this one copies
        self.leader: Request | None = None
        #: this generation's own output constraint state
        self.constraint = constraint
        #: where the engine reports how many prompt tokens it did not compute
        self.reuse = reuse
        #: what the conversation's next prompt puts after the answer (`TokenRequest`)
        self.next_turn_opening = next_turn_opening
        #: the LoRA adapter it computes with (None: the base model)
        self.adapter: AdapterKey = adapter_key(params.lora, params.lora_scale)
        #: the prompt's images, and their encodings under way or done
        self.images = media_images(prompt_ids)
        self.encodings: dict[PromptImage, Future[Any]] = {}

    def image_from(self, position: int) -> PromptImage | None:
        """The first image whose span ends after `position`: the next one to evaluate."""
        for image in self.images:
            if image.end > position:
                return image
        return None

    def whole(self, n: int) -> int:
        """`n` kept prompt positions, moved back to the start of an image they cut: an image's
        span is in a sequence whole or not at all."""
        image = self.image_from(n)
        return image.start if image is not None and image.start < n else n

    @property
    def pending(self) -> int:
        return len(self.tokens) - self.fed

    @property
    def ended(self) -> bool:
        return self.closed or self.cancel.cancelled


_END = object()


def _request(request: TokenRequest) -> Request:
    return Request(
        request.prompt_ids,
        request.params,
        request.cancel,
        request.limit,
        request.constraint,
        request.reuse,
        request.next_turn_opening,
    )


class TokenStream:
    """One request's tokens as the scheduler samples them, read from its mailbox. Reading to the
    end, an error, `close()` or a cancel frees its sequence at the next step (also when it was
    never read)."""

    __slots__ = ("_request", "_done")

    def __init__(self, request: Request):
        self._request = request
        self._done = False

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> int:
        if self._done:
            raise StopIteration
        request = self._request
        item = request.box.take()
        if item is _END or request.cancel.cancelled:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        return item

    @property
    def ready(self) -> bool:
        """True when reading would not wait: a token (or the end) has arrived."""
        return self._done or bool(self._request.box.items)

    def close(self) -> None:
        self._done = True
        self._request.closed = True


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one step computes: a token for every decoding request in one forward pass, then
    prompt chunks, each in a forward pass of its own (or all of it in one pass: `one_pass`)."""

    decode: list[tuple[Request, BatchEntry]]
    prefill: list[tuple[Request, BatchEntry]]


def plan_step(
    running: Sequence[Request],
    n_batch: int,
    chunk: int,
    *,
    one_pass: bool = False,
    aligned: bool = True,
    drafts: Mapping[Request, Sequence[int]] | None = None,
) -> StepPlan:
    """Plan the next step. While others decode, a step takes at most `chunk` prompt tokens, so
    their streams keep flowing; otherwise up to `n_batch`. `aligned`: prompts advance in chunks
    aligned to multiples of `chunk`, whatever runs beside them, so a request computes exactly the
    same numbers alone or in a batch; otherwise a prompt alone goes in passes of up to `n_batch`
    (fewer, wider passes: a sooner first token). In `one_pass` the whole step is one forward pass
    of at most `n_batch` tokens, decoding tokens first.

    Decode entries are sorted by sequence: llama.cpp puts only consecutive sequence ids into one
    micro-batch. `drafts`: a speculative draft per decoding request, verified in the same pass
    (the caller keeps them within the batch)."""
    drafts = drafts or {}
    decoding = sorted((r for r in running if r.pending == 1), key=lambda r: r.seq)
    width = len(decoding) + sum(len(d) for d in drafts.values())
    budget = n_batch - width if one_pass else chunk if decoding else n_batch
    prefill = []
    for i, r in enumerate(running):
        if r.fed < r.prompt_len - 1 and _mate_computes_next_chunk(r, running[:i], chunk):
            continue
        start = r.fed
        while len(r.tokens) - start > 1 and budget > 0:
            image = r.image_from(start)
            if image is not None and image.start == start:
                # whole, once encoded (meanwhile the others go on); alone in a step if it is
                # wider than the step's budget; in one pass, where images go first, only at the
                # start of its request's part of the step
                if not r.encodings[image].done() or (image.n_tokens > budget and prefill):
                    break
                if one_pass and start != r.fed:
                    break
                prefill.append((r, _image_entry(r, image)))
                budget -= image.n_tokens
                start = image.end
                continue
            end = min((start // chunk + 1) * chunk if aligned else start + budget, len(r.tokens))
            end = min(end, image.start) if image is not None else end
            if end - start > budget:
                break
            prefill.append((r, _entry(r, start, end)))
            budget -= end - start
            start = end
        if budget <= 0:
            break
    return StepPlan([(r, _decode_entry(r, drafts.get(r, ()))) for r in decoding], prefill)


def shared_chunks(source: Request, request: Request, chunk: int, computed: int | None = None) -> int:
    """How many tokens of `request`'s prompt `source` has computed (or will have, at `computed`)
    in whole prompt chunks of its own: the same tokens from position 0, so the same numbers
    (chunks are aligned to multiples of `chunk` in every request). Never `request`'s last prompt
    token, whose logits give its first token, nor `source`'s generated tokens, which were
    computed one at a time."""
    done = source.fed if computed is None else computed
    limit = min(done, source.prompt_len, request.prompt_len - 1) // chunk * chunk
    n = 0
    while n < limit and source.tokens[n : n + chunk] == request.tokens[n : n + chunk]:
        n += chunk
    return request.whole(n)


def _mate_computes_next_chunk(r: Request, earlier: Sequence[Request], chunk: int) -> bool:
    """`r` waits for this step when a request before it, at the same place in the same prompt,
    will compute `r`'s next chunk: `r` copies it afterwards instead of computing it too."""
    end = (r.fed // chunk + 1) * chunk
    if end > r.prompt_len - 1:
        return False  # its last chunk is its own (it holds the token that gives its logits)
    return any(s.fed == r.fed and shared_chunks(s, r, chunk, computed=end) >= end for s in earlier)


def _entry(r: Request, start: int, end: int) -> BatchEntry:
    return BatchEntry(r.seq, r.tokens[start:end], start, end == len(r.tokens), r.sampler, r.params.logprobs)


def _image_entry(r: Request, image: PromptImage) -> BatchEntry:
    return BatchEntry(r.seq, r.tokens[image.start : image.end], image.start, False, r.sampler, image=image)


def _decoding(entry: BatchEntry) -> bool:
    """Whether `entry` decodes (its last sampled token and any draft), not a prompt chunk."""
    return entry.sample and len(entry.tokens) == 1 + len(entry.draft)


def _decode_entry(r: Request, draft: Sequence[int]) -> BatchEntry:
    if not draft:
        return _entry(r, r.fed, r.fed + 1)
    tokens = [r.tokens[r.fed], *draft]
    return BatchEntry(r.seq, tokens, r.fed, True, r.sampler, r.params.logprobs, draft=draft)


def _waits_for_leader(request: Request) -> bool:
    """A choice waits while its leader is still computing the shared prompt (a leader that
    ended, or not yet placed, leaves the choice to compute it itself once placed)."""
    leader = request.leader
    return leader is not None and not leader.ended and leader.seq >= 0 and leader.fed < leader.prompt_len


class BatchScheduler:
    """Runs every active request in one batched step, each in its own sequence.

    Running requests always hold sequences 0..n-1: with one KV stream per sequence, llama.cpp
    batches only consecutive sequence ids together, so a gap would split each step into two
    forward passes. A finished request's sequence is refilled by a waiting request or by moving
    the highest one down.

    A free sequence keeps what its last request computed, prompt and answer: a new request
    whose prompt starts with any of it (the next turn of that conversation, a shared system
    prompt) computes only the rest, to the token (`reuse_tokens`). With `reuse_tokens` off, only
    whole prompt chunks are reused (computed in the same splits as any cold request), so that
    reuse never changes a result. A sequence's content about to be overwritten goes to the
    `prompt_cache` (host memory, disk), from which a later request restores it.
    """

    def __init__(
        self,
        backend: StepBackend,
        *,
        parallel: int,
        n_ctx: int,
        n_batch: int,
        prefill_chunk: int,
        eos_token_ids: Collection[int],
        one_pass: bool = False,
        reuse_tokens: bool = True,
        prompt_cache: PromptCache | None = None,
        next_turn_openings: bool = True,
        speculation: Speculation | None = None,
        draft_model: SequenceDrafter | None = None,
        equal_drafts: bool = False,
        first_token_wait_s: float = 0.0,
        wake_at_pass: bool = False,
    ):
        """`one_pass`: each step is one forward pass over the decoding tokens and the prompt
        chunks together (for a GPU, where that costs about as much as the decoding tokens alone).
        `speculation`: decoding requests that allow it verify a draft in the step's pass (not
        those with an output constraint: the backend masks only a pass's first row), from prompt
        lookup or, for text-only requests, from `draft_model` (its sequence ids are the
        scheduler's); `equal_drafts`: all of one length (a KV stream per sequence, `Drafts`).
        `next_turn_openings`: compute a whole answer's next-turn opening once idle (with
        `reuse_tokens`; `_open_next_turn`). `first_token_wait_s`: after a step that gave requests
        their first token, how long the next step may wait for those tokens' consumers to take
        them (`wait_taken`; for a forward pass that takes every core). `wake_at_pass`: a step's
        tokens wake their consumers as the next forward pass starts, not as the step ends, so
        that the consumers (the event loop, streaming them) take the GIL while a device computes
        rather than while this thread plans the pass (for a pass that leaves the cores free)."""
        if n_batch < max(parallel, prefill_chunk):
            raise ValueError(f"n_batch ({n_batch}) must be at least parallel and prefill_chunk")
        self.backend = backend
        self.parallel = parallel
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.prefill_chunk = prefill_chunk
        self.one_pass = one_pass
        self.reuse_tokens = reuse_tokens
        self.next_turn_openings = next_turn_openings
        self.first_token_wait_s = first_token_wait_s
        self.wake_at_pass = wake_at_pass
        self.prompt_cache = prompt_cache if prompt_cache is not None and prompt_cache.enabled else None
        self._eos = frozenset(eos_token_ids)
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._stopping = False
        #: `persist` calls waiting for the scheduler thread to save what the sequences keep
        self._persists: list[threading.Event] = []
        self._failure: EngineFailed | None = None
        # owned by the scheduler thread
        #: mailboxes given something since their consumers were last woken
        self._delivered: list[Mailbox] = []
        #: mailboxes given their request's first token in this step (with `first_token_wait_s`)
        self._first_tokens: list[Mailbox] = []
        self._running: list[Request] = []  # in admission order
        self._holder: list[Request | None] = [None] * parallel
        self._cached: list[list[int]] = [[] for _ in range(parallel)]
        self._steps = 0
        #: the adapter the backend computes with now
        self._adapter: AdapterKey = None
        self._decoded = 0
        self._generated = 0
        self._reused = 0
        self._saves = 0
        self._restores = 0
        self._save_s = 0.0
        self._save_s_max = 0.0
        #: free sequence -> (what it kept when its answer ended, the tokens its conversation's next
        #: prompt continues with), most recent last (`_open_next_turn`)
        self._openings: dict[int, tuple[list[int], list[int]]] = {}
        self._opened = 0
        self._drafts = (
            Drafts(speculation, draft_model, equal=equal_drafts) if speculation is not None else None
        )
        self.speculation_counts = SpeculationCounts()
        self._thread = threading.Thread(target=self._run, name="llmflow-batch-scheduler", daemon=True)
        self._thread.start()

    # -- consumer side (any thread) --

    def generate(self, token_request: TokenRequest) -> Iterator[int]:
        """Token ids of one generation, as the scheduler samples them. It stops after
        `token_request.limit` tokens or an end-of-generation token (which frees its sequence at
        once); closing the iterator or cancelling frees the sequence at the next step. A
        constraint: the sampled tokens only ever spell what it accepts."""
        request = _request(token_request)
        if request.limit <= 0:
            return
        self._submit([request])
        yield from TokenStream(request)

    def generate_group(self, token_requests: Sequence[TokenRequest]) -> list[TokenStream]:
        """Several answers to one prompt (OpenAI's `n`), one iterator each, to be read at once
        (in turn, the one that is `ready` first). The prompt is computed once: the others copy its KV cache
        (all but its last token, which each computes itself, so that each samples its own first
        token) once the first choice has computed it. Each request has its own constraint state:
        each choice's sampled tokens advance only its own."""
        requests = [_request(r) for r in token_requests]
        for follower in requests[1:]:
            follower.leader = requests[0]
        self._submit(requests)
        return [TokenStream(r) for r in requests]

    def stats(self) -> SchedulerStats:
        with self._cond:
            waiting = len(self._waiting)
        free = self._holder.count(None)
        return SchedulerStats(
            parallel=self.parallel,
            running=self.parallel - free,
            waiting=waiting,
            free_sequences=free,
            steps=self._steps,
            tokens_decoded_total=self._decoded,
            tokens_generated_total=self._generated,
            prompt_tokens_reused_total=self._reused,
            cache_saves_total=self._saves,
            cache_restores_total=self._restores,
            cache_save_seconds_total=self._save_s,
            cache_save_seconds_max=self._save_s_max,
            draft_tokens_proposed_total=self.speculation_counts.proposed,
            draft_tokens_accepted_total=self.speculation_counts.accepted,
            next_turn_tokens_total=self._opened,
        )

    def persist(self, timeout: float = 60.0) -> None:
        """Save what the free sequences keep to a prompt cache that outlives the process (a disk
        tier), done by the scheduler thread between two steps, and wait until it is on disk: what
        a server does at shutdown, so that a restarted one finds the conversations."""
        cache = self.prompt_cache
        if cache is None or not cache.persistent:
            return
        done = threading.Event()
        with self._cond:
            if self._stopping:
                return
            self._persists.append(done)
            self._cond.notify()
        done.wait(timeout)
        cache.flush(timeout)

    def close(self) -> None:
        """Stop the scheduler thread; requests still running end with `EngineFailed`."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _submit(self, requests: Sequence[Request]) -> None:
        with self._cond:
            if self._failure is not None:
                raise EngineFailed(str(self._failure))
            if self._stopping:
                raise EngineFailed("the engine is closed")
            # images start encoding now, before the scheduler thread sees the request (which
            # starts those a request still lacks when it places it)
            for request in requests:
                if request.leader is None:  # a choice copies its leader's prompt, images and all
                    self._encode(request, 0)
            self._waiting.extend(requests)
            self._cond.notify()

    def _encode(self, request: Request, fed: int) -> None:
        """Start encoding the images of `request`'s prompt past position `fed` not yet asked."""
        for image in request.images:
            if image.end > fed and image not in request.encodings:
                request.encodings[image] = encoding = self.backend.encode_image(image)
                encoding.add_done_callback(self._encoded)

    # -- scheduler thread --

    def _run(self) -> None:
        failure = EngineFailed("the engine was closed while generating")
        try:
            while (work := self._wait_for_work()) != "stop":
                if work == "open":
                    self._open_next_turn()
                    continue
                self._answer_persists()
                self._step()
            self._save_kept()
        except BaseException as exc:
            log.exception("the batch scheduler stopped")
            failure = EngineFailed(f"the batch scheduler stopped: {exc!r}")
            with self._cond:
                self._failure = failure
        self._fail_everything(failure)

    def _wait_for_work(self) -> Literal["step", "open", "stop"]:
        """What to do next: a step; once idle for `OPENING_WAIT_S` with an answer's next-turn
        opening noted, that opening; or stop."""
        with self._cond:
            if self._idle:
                self.backend.idle()
                if self._openings:
                    self._cond.wait(OPENING_WAIT_S)
                    if self._idle:
                        return "open"
            while self._idle:
                self._cond.wait()
            return "stop" if self._stopping else "step"

    @property
    def _idle(self) -> bool:
        """Nothing to run and no reason to stop (read under `_cond`)."""
        return not self._stopping and not self._waiting and not self._running and not self._persists

    def _step(self) -> None:
        self._retire_ended()
        self._admit()
        self._compact()
        if not self._running:
            self._deliver()
            return
        self._share_prefixes()
        running = self._adapter_group()
        plan = plan_step(
            running,
            self.n_batch,
            self.prefill_chunk,
            one_pass=self.one_pass,
            aligned=not self.reuse_tokens,
            drafts=self._propose(running),
        )
        self._steps += 1
        if not plan.decode and not plan.prefill:
            self._deliver()
            if any(not e.done() for r in running for e in r.encodings.values()):
                self._await_encodings()
            return
        if self.one_pass:
            self._forward(plan.decode + plan.prefill)
        else:
            if plan.decode:
                self._forward(plan.decode)
                if not self.wake_at_pass:  # else the first prompt chunk's pass delivers them
                    self._deliver()  # the decoding streams' tokens go out before the prompt chunks run
            for item in plan.prefill:
                if item[0].seq >= 0:  # not ended by a failed pass
                    self._forward([item])
        self._end_step()

    def _end_step(self) -> None:
        """Hand out what the step gave: now, or with `wake_at_pass` as the next pass starts
        (`_forward`), unless no pass follows (nothing runs) or first tokens are waited for."""
        if self.wake_at_pass and self._running and not self._first_tokens:
            return
        self._deliver()
        if self._first_tokens:
            self._let_first_tokens_out()

    def _let_first_tokens_out(self) -> None:
        """A first token is a request's time to first token: its consumer sends it before the
        next pass's threads take the cores (on two cores, a consumer woken into a running pass
        waited 3-5 ms for one in two requests out of five)."""
        boxes, self._first_tokens = self._first_tokens, []
        wait_taken(boxes, self.first_token_wait_s)

    def _await_encodings(self) -> None:
        """Nothing to compute: every running request waits for an image's encoding. Sleep until
        one is done (its future notifies) or anything else arrives, within `ENCODING_WAIT_S` (a
        cancel does not notify); the decode thread hands its OpenMP team back meanwhile, so the
        encoder's threads have the cores."""
        self.backend.idle()
        with self._cond:
            if not self._waiting and not self._stopping and not self._persists:
                self._cond.wait(ENCODING_WAIT_S)

    def _encoded(self, _: Future[Any]) -> None:
        with self._cond:
            self._cond.notify()

    def _adapter_group(self) -> list[Request]:
        """The running requests this step computes: all of them when they share one adapter (or
        none); else those of one adapter, each adapter's in turn (llama.cpp applies adapters to
        a whole pass), the backend switched to it."""
        adapters = sorted({r.adapter for r in self._running}, key=lambda a: (a is not None, a or ("", 0.0)))
        adapter = adapters[self._steps % len(adapters)]
        if adapter != self._adapter:
            self.backend.set_adapter(adapter)
            self._adapter = adapter
        if len(adapters) == 1:
            return self._running
        return [r for r in self._running if r.adapter == adapter]

    def _share_prefixes(self) -> None:
        """A request still computing its prompt takes the whole chunks of it that another running
        request has computed already (a memory copy): concurrent chats that start with one long
        system prompt compute it once, not once each."""
        chunk = self.prefill_chunk
        for r in self._running:
            if r.fed + chunk > r.prompt_len - 1:
                continue  # no whole chunk of its prompt left to take
            best, most = None, r.fed
            for s in self._running:
                if s is not r and s.fed > most and s.adapter == r.adapter:
                    n = shared_chunks(s, r, chunk)
                    if n > most:
                        best, most = s, n
            if best is not None:
                self.backend.copy(best.seq, r.seq)
                r.fed = self.backend.truncate(r.seq, most)

    def _propose(self, running: Sequence[Request]) -> dict[Request, list[int]]:
        """This step's drafts: each decoding request that allows one, within what it may still
        generate and, all together, within the batch (and a prompt chunk beside them in one
        pass), sized by the drafts' planner (`Drafts.propose`)."""
        drafts = self._drafts
        if drafts is None:
            return {}
        drafts.keep_only(self._running)
        decoding = [r for r in running if r.pending == 1]
        room = self.n_batch - len(decoding) - (self.prefill_chunk if self.one_pass else 0)
        wants: list[Want] = []
        for r in decoding:
            if r.constraint is not None or not r.params.speculative:
                continue
            most = min(r.limit - r.generated - 1, self.n_ctx - len(r.tokens))
            if most > 0:
                wants.append(Want(r, r.seq, r.tokens, most, not r.images))
        if room <= 0 or not wants:
            return {}
        return {r: draft for r, draft in drafts.propose(wants, len(decoding), room).items() if draft}

    def _forward(self, planned: list[tuple[Request, BatchEntry]]) -> None:
        """One forward pass, then hand out the sampled tokens; the images among the entries
        first, each in a pass of its own (a pass takes tokens or embeddings, not both)."""
        planned = self._constrained(self._images_first(planned))
        if not planned:
            return
        entries = [entry for _, entry in planned]
        if self.wake_at_pass:
            self._deliver()
        try:
            started = time.perf_counter()
            sampled = iter(self.backend.decode(entries))
            if self._drafts is not None and all(_decoding(e) for e in entries):
                # what a decoding pass of this width costs sizes the next drafts
                self._drafts.cost.observe(sum(len(e.tokens) for e in entries), time.perf_counter() - started)
        except EngineFailed as exc:
            for request, _ in planned:
                if request.seq >= 0:
                    self._finish(request, exc)
            return
        for request, entry in planned:
            request.fed += len(entry.tokens)
            self._decoded += len(entry.tokens)
            if entry.draft:
                self._take_run(request, entry, next(sampled))
            elif entry.sample:
                self._emit(request, next(sampled))

    def _images_first(self, planned: list[tuple[Request, BatchEntry]]) -> list[tuple[Request, BatchEntry]]:
        """Evaluate the planned images; the other entries of requests still running."""
        rest = []
        for request, entry in planned:
            if entry.image is None:
                rest.append((request, entry))
                continue
            try:
                encoded = request.encodings.pop(entry.image).result()
                self.backend.decode_image(request.seq, entry.image, encoded)
            except EngineFailed as exc:
                self._finish(request, exc)
                continue
            except Exception as exc:  # an image the projector could not read
                self._finish(request, EngineFailed(f"the image at {entry.image.image.field} failed: {exc}"))
                continue
            request.fed = entry.image.end
            self._decoded += len(entry.tokens)
        return [(request, entry) for request, entry in rest if request.seq >= 0]

    def _take_run(self, request: Request, entry: BatchEntry, run: Sequence[int]) -> None:
        """A verified draft: the rejected draft tokens' cells go, then the run's tokens are handed
        out one by one, as a token per step would be (the request may end inside the run)."""
        confirmed = len(run) - 1
        rejected = len(entry.draft) - confirmed
        if rejected:
            request.fed -= rejected
            self.backend.truncate(request.seq, request.fed)
        assert self._drafts is not None
        proposed, taken = self._drafts.record(request, len(entry.draft), confirmed)
        self.speculation_counts.add(proposed, taken)
        if request.reuse is not None:
            request.reuse.add_drafts(proposed, taken)
        for token in run:
            if request.seq < 0:  # ended inside the run: an end-of-generation token, its limit
                return
            self._emit(request, token)

    def _constrained(self, planned: list[tuple[Request, BatchEntry]]) -> list[tuple[Request, BatchEntry]]:
        """The entries with the tokens each request's constraint allows next (computed before the
        pass: they depend only on the tokens so far). A constraint that fails ends its own
        request, not the step."""
        kept = []
        for request, entry in planned:
            if entry.sample and request.constraint is not None:
                try:
                    entry = replace(entry, allowed=request.constraint.allowed())
                except EngineFailed as exc:
                    self._finish(request, exc)
                    continue
            kept.append((request, entry))
        return kept

    def _emit(self, request: Request, token: int) -> None:
        if request.constraint is not None:
            try:
                request.constraint.advance(int(token))
            except EngineFailed as exc:
                self._finish(request, exc)
                return
        request.tokens.append(token)
        request.generated += 1
        self._generated += 1
        request.box.put(token)
        self._delivered.append(request.box)
        if request.generated == 1 and self.first_token_wait_s > 0:
            self._first_tokens.append(request.box)
        if token in self._eos or request.generated >= request.limit:
            self._finish(request, whole=True)

    def _finish(self, request: Request, error: EngineFailed | None = None, whole: bool = False) -> None:
        """Free the request's sequence (what it computed stays there for the next request, unless
        the pass failed), then tell its consumer. `whole`: the answer ended by itself (an
        end-of-generation token, its limit), so its conversation may go on from it."""
        seq = request.seq
        request.seq = -1
        self._running.remove(request)
        self._holder[seq] = None
        self.backend.free_sampler(request.sampler)
        request.sampler = None
        if error is None and request.adapter is not None:
            # kept tokens and saved states are the base model's: an adapter's are not kept
            self._cached[seq] = []
            self.backend.truncate(seq, 0)
            self._post(request, _END)
            return
        if error is None:
            if self.reuse_tokens:
                self._cached[seq] = request.tokens[: request.fed]
                if whole and self.next_turn_openings and request.next_turn_opening:
                    self._note_opening(seq, request)
            else:
                whole_chunks = request.prompt_len // self.prefill_chunk * self.prefill_chunk
                kept = min(request.fed, whole_chunks)
                self._cached[seq] = request.tokens[: self.backend.truncate(seq, kept)]
            self._post(request, _END)
            return
        self._cached[seq] = []
        self._post(request, EngineFailed(str(error)))  # one instance per consumer
        self.backend.truncate(seq, 0)

    def _note_opening(self, seq: int, request: Request) -> None:
        """What `seq` would compute while idle for the conversation's next turn
        (`next_turn_tokens`)."""
        tokens = next_turn_tokens(request.tokens[request.fed :], self._eos, request.next_turn_opening)
        self._openings.pop(seq, None)  # re-inserted: the most recent answer last
        self._openings[seq] = (self._cached[seq], tokens)

    def _open_next_turn(self) -> None:
        """Compute the most recent answer's next-turn opening in its sequence (nothing runs or
        waits), so that the conversation's next prompt computes only its new message (whatever
        of it does not match is dropped then, as any kept token is)."""
        if not self._openings or self._waiting:
            return
        seq, (kept, tokens) = self._openings.popitem()
        if self._holder[seq] is not None or self._cached[seq] is not kept:
            return  # the sequence went on to something else
        if len(kept) + len(tokens) > self.n_ctx:
            return
        try:
            self.backend.truncate(seq, len(kept))  # cells past what it keeps (a run after an end)
            self.backend.decode([BatchEntry(seq, tokens, len(kept), sample=False, sampler=None)])
        except EngineFailed as exc:
            log.warning("computing a next-turn opening failed: %s", exc)
            self._cached[seq] = kept[: self.backend.truncate(seq, len(kept))]
            return
        self._decoded += len(tokens)
        self._opened += len(tokens)
        self._cached[seq] = kept + tokens

    def _post(self, request: Request, item: Any) -> None:
        request.box.put(item)
        self._delivered.append(request.box)

    def _deliver(self) -> None:
        """Wake the consumers that wait for what this pass gave them: one hand-off per pass."""
        if self._delivered:
            wake(self._delivered)
            self._delivered = []

    def _retire_ended(self) -> None:
        for request in [r for r in self._running if r.ended]:
            self._finish(request)
        with self._cond:
            if any(r.ended for r in self._waiting):
                for request in [r for r in self._waiting if r.ended]:
                    self._waiting.remove(request)
                    self._post(request, _END)

    def _admit(self) -> None:
        """Fill free sequences in arrival order; a choice whose leader has not computed the
        prompt yet keeps its place in the queue."""
        deferred: list[Request] = []
        while None in self._holder:
            with self._cond:
                if not self._waiting:
                    break
                request = self._waiting.popleft()
            if _waits_for_leader(request):
                deferred.append(request)
                continue
            self._place(request, self._seat_for(request))
        if deferred:
            with self._cond:
                self._waiting.extendleft(reversed(deferred))

    def _seat_for(self, request: Request) -> int:
        """The free sequence `request` starts in: a gap between the running ones or one next to
        them (they must stay contiguous: llama.cpp computes a step over the KV streams from the
        lowest sequence to the highest), or any while none runs; of those, the one keeping the
        longest prefix of its prompt, else the one keeping the least. Kept conversations so stay
        where they are instead of being copied aside for a newcomer (a KV copy between streams
        is a state save and restore: tens of milliseconds for a long chat)."""
        free = [s for s, holder in enumerate(self._holder) if holder is None]
        if self._running:
            low = min(r.seq for r in self._running)
            high = max(r.seq for r in self._running)
            inside = [s for s in free if low < s < high]  # left by a request that ended
            free = inside or [s for s in free if s in (low - 1, high + 1)]
        return max(free, key=lambda s: (self._reusable(self._cached[s], request), -len(self._cached[s])))

    def _place(self, request: Request, seq: int) -> None:
        """Start `request` in sequence `seq`, reusing the longest kept prefix of its prompt:
        `seq`'s own, another free sequence's (copied), or a saved state (restored)."""
        reuse = self._take_longest_prefix(seq, request)
        leader = request.leader
        if leader is not None and leader.seq >= 0 and request.prompt_len - 1 > reuse:
            self._keep(seq)
            self.backend.copy(leader.seq, seq)  # the prompt its leader computed
            reuse = request.prompt_len - 1
        else:
            self._keep(seq, keeping=reuse)  # the part past `reuse` is about to go
        request.fed = self.backend.truncate(seq, reuse)
        if request.leader is None:
            self._reused += request.fed
            if request.reuse is not None:
                request.reuse.cached_tokens = request.fed
        self._encode(request, request.fed)
        request.seq = seq
        request.sampler = self.backend.new_sampler(request.params)
        self._holder[seq] = request
        self._cached[seq] = []
        self._running.append(request)

    def _take_longest_prefix(self, seq: int, request: Request) -> int:
        """Put the longest kept prefix of `request`'s prompt into `seq`: from `seq` itself,
        another free sequence (a memory copy: cheaper than computing a chunk) or the prompt cache
        (restored when it holds at least a chunk more). How many tokens `seq` then holds for it.
        What is kept is the base model's: a request with an adapter reuses none of it."""
        if request.adapter is not None:
            return 0
        best, most = seq, self._reusable(self._cached[seq], request)
        for other, holder in enumerate(self._holder):
            if holder is None and other != seq:
                n = self._reusable(self._cached[other], request)
                if n > most:
                    best, most = other, n
        if self.prompt_cache is not None:
            saved, key = self.prompt_cache.longest(request.tokens)
            if key is not None and self._usable(saved, request) >= most + self.prefill_chunk:
                restored = self._restore(seq, key, request)
                if restored:
                    return restored
        if best != seq:
            self._keep(seq, avoid=best)
            self.backend.copy(best, seq)
            self._cached[seq] = self._cached[best]
        return most

    def _restore(self, seq: int, key: str, request: Request) -> int:
        """Load a saved state into `seq` (what `seq` held goes to the cache first); how many of
        `request`'s tokens it holds, 0 when it could not be loaded."""
        assert self.prompt_cache is not None
        loaded = self.prompt_cache.load(key)
        if loaded is None:
            return 0
        tokens, state = loaded
        self._keep(seq)
        self._cached[seq] = []
        if not self.backend.restore(seq, state):
            log.warning("the engine refused a saved prompt state; computing the prompt")
            return 0
        self._restores += 1
        self._cached[seq] = list(tokens)
        return self._reusable(self._cached[seq], request)

    def _answer_persists(self) -> None:
        with self._cond:
            asked, self._persists = self._persists, []
        if asked:
            self._save_kept()
            for done in asked:
                done.set()

    def _save_kept(self) -> None:
        """At a clean stop, what the free sequences keep goes to a prompt cache that outlives the
        process (a disk tier), so that a restarted server finds the conversations."""
        if self.prompt_cache is None or not self.prompt_cache.persistent:
            return
        for seq, holder in enumerate(self._holder):
            if holder is None and self._cached[seq]:
                self._spill(seq)

    def _spill(self, seq: int) -> None:
        """Save what free sequence `seq` holds to the prompt cache (unless the cache holds it
        already, or it is too short to be worth it)."""
        cached = self._cached[seq]
        cache = self.prompt_cache
        if cache is None or cache.covers(cached):
            return
        started = time.perf_counter()
        state = self.backend.save(seq)
        if state is not None:
            self._saves += 1
            cache.put(cached, state)
        took = time.perf_counter() - started
        self._save_s += took
        self._save_s_max = max(self._save_s_max, took)

    def _reusable(self, cached: Sequence[int], request: Request) -> int:
        """Of `cached`, the tokens `request` reuses: none with an adapter (what is kept is the
        base model's)."""
        if request.adapter is not None:
            return 0
        return self._usable(common_prefix(cached, request.tokens), request)

    def _usable(self, shared: int, request: Request) -> int:
        """Of `shared` tokens kept for `request`'s prompt, those it keeps: at least its last
        prompt token is computed again, since its logits give the first token; without
        `reuse_tokens`, whole chunks only."""
        n = min(shared, request.prompt_len - 1)
        return request.whole(n if self.reuse_tokens else n // self.prefill_chunk * self.prefill_chunk)

    def _compact(self) -> None:
        """Move the highest running sequences down into gaps, so that running ones are
        contiguous from the lowest (`_seat_for`); a gap's cached tokens move to a free sequence
        first, where the next request with that prefix (a shared system prompt) finds them."""
        if not self._running:
            return
        low, n = min(r.seq for r in self._running), len(self._running)
        for gap in range(low, low + n):
            if self._holder[gap] is not None:
                continue
            top = max(r.seq for r in self._running)
            request = self._holder[top]
            assert request is not None
            self._keep(gap, avoid=top)
            self.backend.copy(top, gap)
            self.backend.truncate(top, 0)
            self._holder[gap], self._holder[top] = request, None
            self._cached[gap], self._cached[top] = [], []
            request.seq = gap

    def _keep(self, seq: int, keeping: int = 0, avoid: int = -1) -> None:
        """Before all but the first `keeping` tokens that free sequence `seq` holds are
        overwritten, keep them (when at least a chunk's worth would go): in the free sequence
        holding the fewest (not `seq`, nor `avoid`, about to be read), a memory copy, when it
        holds fewer; that one's own, or else `seq`'s, go to the prompt cache."""
        cached = self._cached[seq]
        if len(cached) - keeping < self.prefill_chunk:
            return
        spares = [s for s, h in enumerate(self._holder) if h is None and s not in (seq, avoid)]
        spare = min(spares, key=lambda s: len(self._cached[s]), default=None)
        if spare is None or len(self._cached[spare]) >= len(cached):
            self._spill(seq)
            return
        self._spill(spare)
        self.backend.copy(seq, spare)  # a memory copy: cheaper than computing the tokens again
        self._cached[spare] = cached

    def _fail_everything(self, failure: EngineFailed) -> None:
        """End every request with `failure`: consumers first, so none waits on a broken backend."""
        with self._cond:
            self._stopping = True
            ended = [*self._running, *self._waiting]
            self._waiting.clear()
        for request in ended:
            self._post(request, EngineFailed(str(failure)))
        self._deliver()
        for request in list(self._running):
            self._running.remove(request)
            self._holder[request.seq] = None
            self._cached[request.seq] = []
            try:
                self.backend.free_sampler(request.sampler)
            except Exception:  # the backend may be what failed
                log.exception("could not free a sampler")
