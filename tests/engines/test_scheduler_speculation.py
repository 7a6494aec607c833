"""Speculation in the batch scheduler without a model: a simulated backend whose next token mostly
repeats the sequence's tokens of a period ago (so prompt lookup drafts are mostly right) and
sometimes does not (so drafts are cut). Every sequence's 'KV cache' is its token list, checked
at each entry: rejected draft tokens must leave it, and each request must get exactly the tokens
it gets without speculation, alone or beside others. The planner prices passes by their measured
time, here the simulation's, so the tests ask for drafts whenever one is found (`draft_min`):
whether a draft pays is `test_speculation.py`'s concern."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmflow.engines.base import token_request
from llmflow.engines.llama_cpp_draft import BatchedDraftModel
from llmflow.engines.scheduler import BatchScheduler
from llmflow.engines.speculation import Speculation
from llmflow.params import SamplingParams
from llmflow.types import CancelToken

EOS = 0
PERIOD = 7


def next_token(tokens: list[int], seed: int) -> int:
    """The token of a period ago, except every 11th position (shifted by the seed)."""
    n = len(tokens)
    if n < PERIOD or (n + seed) % 11 == 0:
        return (sum(tokens) * 31 + seed + n) % 97 + 1
    return tokens[n - PERIOD]


class CopyBackend:
    def __init__(self, parallel: int):
        self.kv: list[list[int]] = [[] for _ in range(parallel)]
        self.drafted = 0

    def decode(self, entries):
        out = []
        for e in entries:
            assert e.start == len(self.kv[e.seq]), "an entry must continue its sequence"
            self.kv[e.seq].extend(e.tokens)
            if not e.sample:
                continue
            if not e.draft:
                out.append(next_token(self.kv[e.seq], e.sampler))
                continue
            self.drafted += len(e.draft)
            base = len(self.kv[e.seq]) - len(e.draft)
            run = []
            for j in range(len(e.draft) + 1):
                token = next_token(self.kv[e.seq][: base + j], e.sampler)
                run.append(token)
                if j == len(e.draft) or token != e.draft[j]:
                    break
            out.append(run)
        return out

    def new_sampler(self, params):
        return params.seed or 0

    def free_sampler(self, sampler):
        pass

    def copy(self, src, dst):
        self.kv[dst] = list(self.kv[src])

    def idle(self):
        pass

    def truncate(self, seq, keep):
        del self.kv[seq][keep:]
        return keep

    def save(self, seq):
        return None

    def restore(self, seq, state):
        return False


def alone(prompt: list[int], max_tokens: int, seed: int) -> list[int]:
    tokens, out = list(prompt), []
    while len(out) < max_tokens:
        token = next_token(tokens, seed)
        out.append(token)
        tokens.append(token)
        if token == EOS:
            break
    return out


class DraftBackend:
    """A draft model's step backend: greedy picks only, from `next_token` with seed 0 (so its
    drafts are right where a request's own seed agrees, wrong elsewhere); checks that each entry
    continues what its sequence holds, and passes of at most `n_batch` tokens."""

    def __init__(self, parallel: int, n_batch: int = 5, n_ctx_seq: int = 512):
        self.parallel, self.n_batch, self.n_ctx_seq = parallel, n_batch, n_ctx_seq
        self.kv: list[list[int]] = [[] for _ in range(parallel)]
        self.passes = 0

    def decode(self, entries):
        assert sum(len(e.tokens) for e in entries) <= self.n_batch
        self.passes += 1
        out = []
        for e in entries:
            assert e.start == len(self.kv[e.seq]), "a draft entry must continue its sequence"
            self.kv[e.seq].extend(e.tokens)
            if e.sample:
                out.append(next_token(self.kv[e.seq], 0))
        return out

    def truncate(self, seq, keep):
        del self.kv[seq][keep:]
        return keep

    def close(self):
        pass


def run_all(requests, *, speculation, parallel=4, one_pass=False, draft_model=None, equal_drafts=False):
    backend = CopyBackend(parallel)
    scheduler = BatchScheduler(
        backend,
        parallel=parallel,
        n_ctx=512,
        n_batch=64,
        prefill_chunk=8,
        eos_token_ids=[EOS],
        one_pass=one_pass,
        speculation=speculation,
        draft_model=draft_model,
        equal_drafts=equal_drafts,
    )
    results: list[list[int]] = [[] for _ in requests]

    def read(i, prompt, max_tokens, seed, speculative):
        params = SamplingParams(max_tokens=max_tokens, seed=seed, speculative=speculative)
        tokens = scheduler.generate(token_request(prompt, params, CancelToken(), 512))
        results[i] = [int(t) for t in tokens]

    threads = [threading.Thread(target=read, args=(i, *r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = scheduler.stats()
    scheduler.close()
    return results, stats, backend


#: 0 is the end-of-generation token: a copied one ends a request inside an accepted run
prompts = st.lists(st.integers(0, 96), min_size=2, max_size=30)
request = st.tuples(prompts, st.integers(1, 40), st.integers(0, 5), st.booleans())


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(request, min_size=1, max_size=6),
    draft_max=st.integers(1, 9),
    one_pass=st.booleans(),
    equal_drafts=st.booleans(),
)
def test_each_request_gets_its_tokens_alone(requests, draft_max, one_pass, equal_drafts):
    """With drafts of each its own length, or all of one length (padded)."""
    speculation = Speculation(draft_max=draft_max, ngram_min=1, ngram_max=3, draft_min=1)
    results, stats, _ = run_all(
        requests, speculation=speculation, one_pass=one_pass, equal_drafts=equal_drafts
    )
    for (prompt, max_tokens, seed, _), got in zip(requests, results, strict=True):
        assert got == alone(prompt, max_tokens, seed)
    assert stats.draft_tokens_accepted_total <= stats.draft_tokens_proposed_total


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(request, min_size=1, max_size=8),
    draft_max=st.integers(1, 9),
    draft_batch=st.integers(2, 40),
    one_pass=st.booleans(),
    equal_drafts=st.booleans(),
)
def test_a_draft_model_gives_each_request_its_tokens_alone(
    requests, draft_max, draft_batch, one_pass, equal_drafts
):
    """More requests than sequences (slots taken again), catch-up passes split by the draft
    model's batch, drafts right and wrong: every request gets what it gets alone."""
    drafter = DraftBackend(parallel=3, n_batch=draft_batch)
    results, stats, _ = run_all(
        requests,
        speculation=Speculation(draft_max=draft_max, draft_min=1),
        parallel=3,
        one_pass=one_pass,
        draft_model=BatchedDraftModel(drafter),
        equal_drafts=equal_drafts,
    )
    for (prompt, max_tokens, seed, _), got in zip(requests, results, strict=True):
        assert got == alone(prompt, max_tokens, seed)
    assert stats.draft_tokens_accepted_total <= stats.draft_tokens_proposed_total
    if any(speculative and max_tokens > 2 for _, max_tokens, _, speculative in requests):
        assert drafter.passes > 0


def test_a_copying_sequence_is_decoded_in_fewer_steps():
    prompt = [5, 9, 3, 8, 2, 7, 4] * 3
    requests = [(prompt, 60, 1, True)]
    results, stats, backend = run_all(requests, speculation=Speculation(draft_max=8, draft_min=4))
    assert results[0] == alone(prompt, 60, 1)
    assert stats.draft_tokens_accepted_total >= 30
    assert stats.steps < 40  # 60 tokens one a step would take 60 steps
    assert backend.drafted == stats.draft_tokens_proposed_total


@pytest.mark.parametrize(("speculation", "per_request"), [(None, True), (Speculation(), False)])
def test_an_engine_without_it_or_a_request_that_opts_out_drafts_nothing(speculation, per_request):
    prompt = [5, 9, 3, 8, 2, 7, 4] * 3
    results, stats, backend = run_all([(prompt, 30, 1, per_request)], speculation=speculation)
    assert results[0] == alone(prompt, 30, 1)
    assert stats.draft_tokens_proposed_total == backend.drafted == 0
