"""The batch scheduler without a model: a simulated backend whose next token depends on every
token of its sequence, so any mix-up in the KV-cache bookkeeping (positions, moves, reused
prefixes) changes the output and fails the comparison with a request run alone."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest

from llmflow.engines.base import token_request
from llmflow.engines.scheduler import BatchEntry, BatchScheduler, Request, plan_step
from llmflow.errors import EngineFailed
from llmflow.params import SamplingParams
from llmflow.types import CancelToken

EOS = 0
VOCAB = 1000
CHUNK = 8


def next_token(tokens: list[int], seed: int) -> int:
    value = seed
    for position, token in enumerate(tokens):
        value = (value * 31 + token * (position + 7)) % 1_000_003
    return value % VOCAB


class SimBackend:
    """Keeps each sequence's tokens as its 'KV cache' and checks every entry continues it."""

    def __init__(self, parallel: int, delay_s: float = 0.0):
        self.kv: list[list[int]] = [[] for _ in range(parallel)]
        self.samplers: set[int] = set()
        self.decode_calls: list[list[int]] = []
        self.copies: list[tuple[int, int]] = []
        self.delay_s = delay_s
        self.fail_seq: int | None = None
        self.crash = False
        self.on_decode = lambda entries: None
        self.idled = 0
        self._ids = itertools.count()

    def decode(self, entries):
        if self.crash:
            raise RuntimeError("backend crashed")
        if self.delay_s:
            time.sleep(self.delay_s)
        self.on_decode(entries)
        self.decode_calls.append([e.seq for e in entries])
        if self.fail_seq is not None and any(e.seq == self.fail_seq for e in entries):
            raise EngineFailed("simulated failure")
        out = []
        for e in entries:
            assert e.start == len(self.kv[e.seq]), "an entry must continue its sequence"
            self.kv[e.seq].extend(e.tokens)
            if e.sample:
                out.append(next_token(self.kv[e.seq], e.sampler[1]))
        return out

    def new_sampler(self, params):
        sampler = (next(self._ids), params.seed or 0)
        self.samplers.add(sampler[0])
        return sampler

    def free_sampler(self, sampler):
        self.samplers.remove(sampler[0])

    def copy(self, src, dst):
        self.copies.append((src, dst))
        self.kv[dst] = list(self.kv[src])

    def idle(self):
        self.idled += 1

    def truncate(self, seq, keep):
        del self.kv[seq][keep:]
        return keep

    def save(self, seq):
        return json.dumps(self.kv[seq]).encode()

    def restore(self, seq, state):
        self.kv[seq] = json.loads(state)
        return True


def alone(prompt: list[int], max_tokens: int, seed: int = 0, n_ctx: int = 256) -> list[int]:
    tokens, out = list(prompt), []
    while len(out) < min(max_tokens, n_ctx - len(prompt)):
        token = next_token(tokens, seed)
        out.append(token)
        tokens.append(token)
        if token == EOS:
            break
    return out


def make(
    parallel=4,
    delay_s=0.0,
    n_batch=64,
    one_pass=False,
    reuse_tokens=True,
    prompt_cache=None,
    openings=True,
    first_token_wait_s=0.0,
    wake_at_pass=False,
):
    backend = SimBackend(parallel, delay_s)
    scheduler = BatchScheduler(
        backend,
        parallel=parallel,
        n_ctx=256,
        n_batch=n_batch,
        prefill_chunk=CHUNK,
        eos_token_ids={EOS},
        one_pass=one_pass,
        reuse_tokens=reuse_tokens,
        prompt_cache=prompt_cache,
        next_turn_openings=openings,
        first_token_wait_s=first_token_wait_s,
        wake_at_pass=wake_at_pass,
    )
    return backend, scheduler


@pytest.fixture(params=[False, True], ids=["wake-at-step-end", "wake-at-pass"])
def sim(request):
    backend, scheduler = make(wake_at_pass=request.param)
    yield backend, scheduler
    scheduler.close()


def submit(scheduler, prompt_ids, params, cancel, constraint=None):
    """One generation, its limit decided as `Engine.generate` decides it."""
    return scheduler.generate(token_request(prompt_ids, params, cancel, scheduler.n_ctx, constraint))


def submit_group(scheduler, prompt_ids, params, cancel):
    requests = [token_request(prompt_ids, p, cancel, scheduler.n_ctx) for p in params]
    return scheduler.generate_group(requests)


def params(max_tokens=16, seed=0):
    return SamplingParams(max_tokens=max_tokens, seed=seed, temperature=0.5)


def prompt(i: int, length: int = 13) -> list[int]:
    return [(i * 17 + k * 5) % (VOCAB - 1) + 1 for k in range(length)]


def settle(scheduler, timeout=10.0):
    """Wait until every sequence is free (a closed stream is released at the next step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = scheduler.stats()
        if stats.free_sequences == stats.parallel and stats.waiting == 0:
            return stats
        time.sleep(0.005)
    raise AssertionError(f"sequences still held: {scheduler.stats()}")


def run_threads(fn, n):
    results: dict[int, object] = {}

    def worker(i):
        results[i] = fn(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


# -- planning --


def _request(seq, tokens, fed, prompt_len=None):
    r = Request(tokens, SamplingParams(), CancelToken(), limit=100)
    r.seq, r.fed = seq, fed
    if prompt_len is not None:
        r.prompt_len = prompt_len
    return r


def test_prompt_chunks_are_aligned_whatever_runs_beside():
    alone_plan = plan_step([_request(0, list(range(1, 21)), 0)], n_batch=64, chunk=8)
    assert [(e.start, len(e.tokens), e.sample) for _, e in alone_plan.prefill] == [
        (0, 8, False),
        (8, 8, False),
        (16, 4, True),
    ]
    # beside a decoding request, the same chunks come one per step
    busy = [_request(1, [5, 6, 7], 2), _request(0, list(range(1, 21)), 8)]
    plan = plan_step(busy, n_batch=64, chunk=8)
    assert [(e.seq, e.start, len(e.tokens)) for _, e in plan.decode] == [(1, 2, 1)]
    assert [(e.seq, e.start, len(e.tokens), e.sample) for _, e in plan.prefill] == [(0, 8, 8, False)]


def test_decoding_requests_go_in_sequence_order():
    running = [_request(seq, [1, 2, 3], 2) for seq in (2, 0, 3, 1)]
    plan = plan_step(running, n_batch=64, chunk=8)
    assert [e.seq for _, e in plan.decode] == [0, 1, 2, 3]
    assert all(e.sample and e.start == 2 for _, e in plan.decode)


def test_a_prompt_with_one_token_left_decodes_with_the_others():
    plan = plan_step([_request(0, list(range(1, 10)), 8)], n_batch=64, chunk=8)
    assert plan.prefill == [] and [(e.start, e.sample) for _, e in plan.decode] == [(8, True)]


def test_a_request_waits_while_one_before_it_computes_the_same_next_chunk():
    shared = list(range(1, 17))
    first, second = _request(0, [*shared, 40, 41], 0), _request(1, [*shared, 50, 51, 52], 0)
    other = _request(2, list(range(60, 80)), 0)
    plan = plan_step([first, second, other], n_batch=64, chunk=8)
    assert sorted({e.seq for _, e in plan.prefill}) == [0, 2]
    # once its mate is ahead, it is no longer at the same place: it copies, then computes its own
    first.fed = 16
    plan = plan_step([first, second], n_batch=64, chunk=8)
    assert (1, 0) in [(e.seq, e.start) for _, e in plan.prefill]


def test_one_pass_fills_the_step_with_prompt_chunks_beside_the_decoding_tokens():
    busy = [_request(1, [5, 6, 7], 2), _request(0, list(range(1, 21)), 0), _request(2, list(range(1, 9)), 0)]
    plan = plan_step(busy, n_batch=24, chunk=8, one_pass=True)
    assert [(e.seq, e.start) for _, e in plan.decode] == [(1, 2)]
    # 23 tokens of budget after the decoding one: seq 0's whole prompt (20), then seq 2's first
    # chunk (8) does not fit the 3 left
    assert [(e.seq, e.start, len(e.tokens)) for _, e in plan.prefill] == [(0, 0, 8), (0, 8, 8), (0, 16, 4)]


# -- generations --


def test_one_pass_generations_match_running_alone_in_one_forward_pass_per_step():
    backend, scheduler = make(parallel=4, delay_s=0.001, one_pass=True)
    try:

        def generate(i):
            time.sleep(0.001 * (i % 3))
            p = prompt(i, 5 + 3 * i)
            return list(submit(scheduler, p, params(12 + i, seed=i), CancelToken())), p

        results = run_threads(generate, 10)
        for i, (out, p) in results.items():
            assert out == alone(p, 12 + i, seed=i), i
        stats = settle(scheduler)
    finally:
        scheduler.close()
    assert len(backend.decode_calls) == stats.steps
    assert any(len(set(seqs)) > 1 for seqs in backend.decode_calls), "expected batched steps"


def test_concurrent_generations_match_running_alone(sim):
    backend, scheduler = sim

    def generate(i):
        time.sleep(0.001 * (i % 3))
        p = prompt(i, 5 + 3 * i)
        return list(submit(scheduler, p, params(12 + i, seed=i), CancelToken())), p

    results = run_threads(generate, 10)  # more than `parallel`: some wait
    for i, (out, p) in results.items():
        assert out == alone(p, 12 + i, seed=i), i
    settle(scheduler)
    assert not backend.samplers


def test_running_sequences_stay_contiguous():
    backend, scheduler = make(parallel=6, delay_s=0.001)
    held: list[list[bool]] = []

    def record(entries):  # on the scheduler thread, before each forward pass of several sequences
        if len(entries) > 1:
            held.append([r is not None for r in scheduler._holder])

    backend.on_decode = record
    try:
        # different lengths: generations end at different times and leave gaps that get closed
        run_threads(lambda i: list(submit(scheduler, prompt(i, 4), params(3 + 7 * i), CancelToken())), 6)
    finally:
        scheduler.close()
    assert any(sum(h) > 1 for h in held), "expected batched steps"
    for h in held:
        first = h.index(True)
        assert h[first : first + sum(h)] == [True] * sum(h), h  # held sequences are contiguous
    batched = [seqs for seqs in backend.decode_calls if len(seqs) > 1]
    assert all(seqs == sorted(seqs) for seqs in batched)


def test_a_repeated_prompt_reuses_its_whole_chunks():
    """With token reuse off (`prompt_cache=false`), only whole prompt chunks are reused."""
    _, scheduler = make(reuse_tokens=False)
    p = prompt(3, 21)
    first = list(submit(scheduler, p, params(4), CancelToken()))
    before = scheduler.stats().tokens_decoded_total
    second = list(submit(scheduler, p, params(4), CancelToken()))
    assert first == second == alone(p, 4)
    # chunks [0, 8) and [8, 16) are reused; [16, 21) and the fed-back tokens are computed
    assert scheduler.stats().tokens_decoded_total - before == 5 + 3
    scheduler.close()


def assert_prefix_reused(scheduler: BatchScheduler, shared: list[int]) -> None:
    """Once idle, a request that starts with `shared` (24 tokens, three whole chunks) reuses
    them (where they are kept, or copied) instead of computing them: it computes its 2 own
    prompt tokens + 1 fed back."""
    settle(scheduler)
    before = scheduler.stats().tokens_decoded_total
    out = list(submit(scheduler, [*shared, 8, 9], params(2), CancelToken()))
    assert out == alone([*shared, 8, 9], 2)
    assert scheduler.stats().tokens_decoded_total - before == 3


def test_a_cached_prefix_in_another_free_sequence_is_reused_where_it_is():
    backend, scheduler = make(parallel=4, delay_s=0.002)
    try:
        shared = prompt(1, 24)
        # sequence 0 is busy, so the shared prompt is computed in sequence 1
        busy = submit(scheduler, prompt(9, 5), params(200), CancelToken())
        next(busy)
        list(submit(scheduler, [*shared, 7], params(2), CancelToken()))
        busy.close()
        # once nothing runs, it starts in sequence 1, where the 24 shared tokens are: no copy
        assert_prefix_reused(scheduler, shared)
        assert backend.kv[1][:24] == shared and backend.kv[1][24:26] == [8, 9]
        assert backend.copies == []
    finally:
        scheduler.close()


def test_concurrent_requests_with_one_long_prefix_compute_it_once():
    """Chats that arrive together with one system prompt: the first computes it, the others
    wait a step at a time and copy its whole chunks, and every answer is the one it gets alone."""
    backend, scheduler = make(parallel=4, n_batch=16)
    fed = []
    backend.on_decode = lambda entries: fed.extend(len(e.tokens) for e in entries)
    shared = prompt(2, 6 * CHUNK)
    prompts = [[*shared, 100 + i, 200 + i, 300 + i] for i in range(4)]
    try:
        results = _read_all(
            [submit(scheduler, p, params(6, seed=i), CancelToken()) for i, p in enumerate(prompts)]
        )
        settle(scheduler)
    finally:
        scheduler.close()
    assert results == [alone(p, 6, seed=i) for i, p in enumerate(prompts)]
    generated = sum(len(r) for r in results)
    # the shared chunks once, each request's own 3 tokens, every generated token but the last fed back
    assert sum(fed) == len(shared) + 4 * 3 + generated - 4


def test_a_running_request_shares_only_whole_prompt_chunks():
    from llmflow.engines.scheduler import shared_chunks

    source = _request(0, [*range(1, 21), 7, 7], 22, prompt_len=20)  # 20 prompt tokens, 2 generated
    # its generated tokens are not shared, nor the partial chunk [16, 20)
    assert shared_chunks(source, _request(1, [*range(1, 21), 7, 7, 9], 0), 8) == 16
    assert shared_chunks(source, _request(1, [*range(1, 12), 99, 5], 0), 8) == 8
    assert shared_chunks(source, _request(1, [*range(1, 9)], 0), 8) == 0  # its last token is its own


def test_a_cached_prefix_outlives_the_move_that_closes_its_gap():
    """A request ends below a running one, which moves down into its sequence: the ended
    request's prompt chunks are copied to a free sequence first, so the next request with the
    same prefix still finds them."""
    _, scheduler = make(parallel=4, delay_s=0.002)
    try:
        shared = prompt(1, 24)
        first = submit(scheduler, [*shared, 7], params(30), CancelToken())
        next(first)  # in sequence 0
        busy = submit(scheduler, prompt(9, 5), params(300), CancelToken())
        next(busy)  # in sequence 1
        list(first)  # ends while busy runs: busy moves down into sequence 0
        busy.close()
        assert_prefix_reused(scheduler, shared)
    finally:
        scheduler.close()


def test_cancel_frees_the_sequence_while_others_go_on():
    backend, scheduler = make(parallel=3, delay_s=0.002)
    cancel = CancelToken()
    got: list[int] = []

    def cancelled():
        for token in submit(scheduler, prompt(0), params(200), cancel):
            got.append(token)
            if len(got) == 3:
                cancel.cancel()
        return got

    try:
        results = run_threads(
            lambda i: (
                cancelled() if i == 0 else list(submit(scheduler, prompt(i), params(30), CancelToken()))
            ),
            3,
        )
        assert results[0] == alone(prompt(0), 200)[:3]
        for i in (1, 2):
            assert results[i] == alone(prompt(i), 30)
        settle(scheduler)
        assert not backend.samplers
    finally:
        scheduler.close()


def test_closing_the_iterator_frees_the_sequence():
    backend, scheduler = make(delay_s=0.002)
    try:
        tokens = submit(scheduler, prompt(1), params(200), CancelToken())
        next(tokens)
        assert scheduler.stats().running == 1
        tokens.close()
        settle(scheduler)
        assert not backend.samplers
    finally:
        scheduler.close()


def test_a_new_request_starts_while_others_decode():
    _, scheduler = make(parallel=4, delay_s=0.002)
    try:
        long_streams = [submit(scheduler, prompt(i), params(200), CancelToken()) for i in range(3)]
        for stream in long_streams:
            next(stream)
        short = list(submit(scheduler, prompt(7), params(4), CancelToken()))
        assert short == alone(prompt(7), 4)
        # the long ones are still going: the short one did not wait for them
        assert scheduler.stats().running == 3
        for stream in long_streams:
            stream.close()
        settle(scheduler)
    finally:
        scheduler.close()


def test_requests_beyond_parallel_wait_for_a_sequence():
    _, scheduler = make(parallel=2, delay_s=0.002)
    try:
        streams = [submit(scheduler, prompt(i), params(200), CancelToken()) for i in range(2)]
        for stream in streams:
            next(stream)
        waiting = threading.Thread(
            target=lambda: list(submit(scheduler, prompt(5), params(3), CancelToken()))
        )
        waiting.start()
        deadline = time.monotonic() + 5
        while scheduler.stats().waiting != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert scheduler.stats().waiting == 1
        streams[0].close()
        waiting.join(timeout=5)
        assert not waiting.is_alive()
        streams[1].close()
        settle(scheduler)
    finally:
        scheduler.close()


def test_no_sequence_leaks_after_many_mixed_requests():
    backend, scheduler = make(parallel=4)
    try:

        def one(i):
            cancel = CancelToken()
            stream = submit(scheduler, prompt(i % 11, 3 + i % 17), params(1 + i % 9, seed=i), cancel)
            for n, _ in enumerate(stream):
                if i % 5 == 0 and n == 1:
                    cancel.cancel()
                if i % 7 == 0 and n == 0:
                    stream.close()
                    break
            return True

        for batch in range(20):
            run_threads(lambda i, b=batch: one(b * 10 + i), 10)
        stats = settle(scheduler)
        assert stats.running == 0 and stats.free_sequences == 4
        assert not backend.samplers
    finally:
        scheduler.close()


def test_the_backend_hears_when_the_scheduler_goes_idle():
    backend, scheduler = make(parallel=2)
    try:
        deadline = time.monotonic() + 10
        while backend.idled == 0:  # idle from the start
            assert time.monotonic() < deadline
            time.sleep(0.001)
        before = backend.idled
        assert list(submit(scheduler, prompt(1, 3), params(2), CancelToken()))
        while backend.idled == before:  # and again once the work is done
            assert time.monotonic() < deadline
            time.sleep(0.001)
    finally:
        scheduler.close()


def test_a_failed_pass_ends_only_its_requests():
    backend, scheduler = make(parallel=3, delay_s=0.002)
    try:
        ok = submit(scheduler, prompt(1), params(200), CancelToken())
        next(ok)
        backend.fail_seq = 1
        with pytest.raises(EngineFailed):
            list(submit(scheduler, prompt(2, 3), params(5), CancelToken()))
        backend.fail_seq = None
        assert len([next(ok) for _ in range(3)]) == 3
        ok.close()
        settle(scheduler)
        assert not backend.samplers
    finally:
        scheduler.close()


def test_a_crashed_scheduler_fails_every_stream_and_later_calls():
    backend, scheduler = make(parallel=2, delay_s=0.002)
    streams = [submit(scheduler, prompt(i), params(200), CancelToken()) for i in range(3)]
    next(streams[0])
    next(streams[1])
    backend.crash = True
    for stream in streams:
        with pytest.raises(EngineFailed):
            list(stream)
    with pytest.raises(EngineFailed):
        next(submit(scheduler, prompt(4), params(2), CancelToken()))
    scheduler.close()


def test_close_ends_running_and_waiting_generations():
    _, scheduler = make(parallel=1, delay_s=0.005)
    running = submit(scheduler, prompt(1), params(240), CancelToken())
    next(running)
    waiting = submit(scheduler, prompt(2), params(5), CancelToken())
    errors = []

    def consume():
        try:
            list(waiting)
        except EngineFailed as exc:
            errors.append(exc)

    t = threading.Thread(target=consume)
    t.start()
    while scheduler.stats().waiting == 0:
        time.sleep(0.001)
    scheduler.close()
    t.join(timeout=5)
    assert errors and not t.is_alive()
    with pytest.raises(EngineFailed):
        list(running)


def test_the_context_window_limits_each_generation(sim):
    _, scheduler = sim
    p = prompt(2, 250)
    out = list(submit(scheduler, p, params(100), CancelToken()))
    assert out == alone(p, 100) and len(out) <= 6


def test_entries_carry_their_sampler():
    r = _request(2, [1, 2, 3], 0)
    r.sampler = "s"
    ((_, entry),) = plan_step([r], 64, 8).prefill
    assert entry == BatchEntry(2, [1, 2, 3], 0, True, "s")


def _read_all(streams) -> list[list[int]]:
    """Read every stream at once, each in a thread of its own (as the choices of one request are)."""
    results: list[list[int]] = [[] for _ in streams]

    def read(i, stream):
        results[i] = list(stream)

    threads = [threading.Thread(target=read, args=(i, s)) for i, s in enumerate(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


@pytest.mark.parametrize("parallel", [4, 2])
def test_a_group_computes_its_prompt_once_and_each_choice_is_its_own_answer(parallel):
    backend, scheduler = make(parallel=parallel)
    fed = []
    backend.on_decode = lambda entries: fed.extend(len(e.tokens) for e in entries)
    try:
        shared = prompt(3, length=5 * CHUNK + 3)
        choices = [params(12, seed=40 + i) for i in range(4)]
        results = _read_all(submit_group(scheduler, shared, choices, CancelToken()))
        settle(scheduler)
    finally:
        scheduler.close()

    assert results == [alone(shared, 12, seed=40 + i) for i in range(4)]
    generated = sum(len(r) for r in results)
    # the prompt once, each other choice its last prompt token, every generated token fed back
    # (but the last of each); with fewer sequences than choices, later ones reuse cached chunks
    assert sum(fed) <= len(shared) + 3 * (CHUNK + 1) + generated
    if parallel == 4:
        assert sum(fed) <= len(shared) + 3 + generated


def test_a_group_whose_leader_is_cancelled_still_answers_nothing_more(sim):
    backend, scheduler = sim
    cancel = CancelToken()
    streams = submit_group(scheduler, prompt(1, 30), [params(200, seed=i) for i in range(3)], cancel)
    next(iter(streams[0]))
    cancel.cancel()
    assert all(len(r) <= 200 for r in _read_all(streams))
    settle(scheduler)
    assert scheduler.stats().running == 0 and not backend.samplers


@pytest.mark.parametrize("one_pass", [False, True])
def test_with_wake_at_pass_a_steps_tokens_go_out_once_the_next_step_is_planned(one_pass):
    """A consumer waiting for a token sampled in one pass is woken after the next step's
    planning (its admissions) and before that step's pass: planning never competes with it for
    the GIL. (One that does not wait takes what is there: a token is in its mailbox at once.)"""
    backend, scheduler = make(delay_s=0.02, one_pass=one_pass, openings=False, wake_at_pass=True)
    planned, planned_at_pass = [0], []
    admit, decode = scheduler._admit, backend.decode

    def counted_admit():
        planned[0] += 1
        admit()

    def counted_decode(entries):
        planned_at_pass.append(planned[0])
        return decode(entries)

    scheduler._admit, backend.decode = counted_admit, counted_decode
    try:
        seen = []
        tokens = []
        for token in submit(scheduler, prompt(1), params(12), CancelToken()):
            tokens.append(token)
            seen.append(planned[0])
        assert tokens == alone(prompt(1), 12)
        settle(scheduler)
        first_pass = len(planned_at_pass) - len(tokens)  # the one that sampled the first token
        # from the second token on, the consumer waited for each (the first may be there before
        # it asks; the last ends the request, which goes out with its step)
        for i, steps_planned in list(enumerate(seen))[1:-1]:
            assert steps_planned > planned_at_pass[first_pass + i], i
    finally:
        scheduler.close()
