"""`TokenMatcher.allows` (one token's check, which the one-at-a-time engine's greedy path uses in
place of a whole mask) agrees with the mask at every step of random walks through the mask, end
of generation tokens included, before and after the constraint completes."""

from __future__ import annotations

import numpy as np
import pytest

from llmflow.constraints import Constraint
from llmflow.constraints.matcher import TokenMatcher
from tests.constraints.schemas import PROMPT, SCHEMAS


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_one_token_check_agrees_with_the_mask(embedded_llm, name):
    matcher = embedded_llm.compile(Constraint.json_schema(SCHEMAS[name])).start()
    eos = sorted(embedded_llm.engine.eos_token_ids)
    rng = np.random.default_rng(len(name))
    for _ in range(64):
        allowed = matcher.allowed()
        allowed_ids = np.flatnonzero(allowed)
        refused_ids = np.flatnonzero(~allowed[: embedded_llm.engine.n_vocab])
        probes = [*eos, *rng.choice(allowed_ids, min(8, allowed_ids.size), replace=False)]
        probes += list(rng.choice(refused_ids, 8, replace=False))
        for token in probes:
            assert matcher.allows(int(token)) == bool(allowed[token]), (name, int(token))
        if matcher.complete:
            assert all(matcher.allows(token) for token in eos)
            return
        walkable = [t for t in allowed_ids if t not in eos] or allowed_ids
        matcher.advance(int(rng.choice(walkable)))
    pytest.fail(f"{name}: the walk did not complete")


@pytest.mark.parametrize("name", ["object", "pattern", "ref"])
def test_greedy_without_the_whole_mask_picks_the_same_tokens(embedded_llm, name, monkeypatch):
    """The one-at-a-time engine masks a greedy step only when the top token is refused: the
    answer is the one that masking every step gives."""
    constraint = Constraint.json_schema(SCHEMAS[name])
    params = {"max_tokens": 40, "temperature": 0.0}
    checked = embedded_llm.generate(PROMPT, params, constraint=constraint)
    monkeypatch.setattr(TokenMatcher, "allows", lambda self, token: False)
    masked = embedded_llm.generate(PROMPT, params, constraint=constraint)
    assert checked.text == masked.text and checked.finish_reason is masked.finish_reason
