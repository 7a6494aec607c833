"""`top_k` (not an OpenAI field; the page sends it) reaches the sampler through the chat route."""

from __future__ import annotations

import httpx


def _answer(http: httpx.Client, model: str, **params) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "Write a poem."}], "max_tokens": 8}
    response = http.post("/v1/chat/completions", json={**body, **params})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_top_k_1_makes_hot_sampling_deterministic(http, served):
    hot = {"temperature": 3.0, "top_p": 1.0, "min_p": 0.0}
    _answer(http, served.name, **hot, top_k=1, seed=0)  # the same prompt cache state for the two below
    one = _answer(http, served.name, **hot, top_k=1, seed=1)
    two = _answer(http, served.name, **hot, top_k=1, seed=2)
    assert one == two
    # without top_k the same heat gives different answers for different seeds
    assert _answer(http, served.name, **hot, top_k=0, seed=1) != _answer(
        http, served.name, **hot, top_k=0, seed=2
    )


def test_a_bad_top_k_is_a_400_naming_it(http, served):
    response = http.post(
        "/v1/chat/completions",
        json={"model": served.name, "messages": [{"role": "user", "content": "Hi"}], "top_k": -1},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "top_k"
