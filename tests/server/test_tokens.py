"""POST /tokenize and /detokenize (llama.cpp's shapes) on the embedded model, over real HTTP."""

from __future__ import annotations

TEXT = "Osaka Castle is famous. 大阪城は有名です。"


def test_tokenize_then_detokenize_gives_the_text_back(http):
    tokens = http.post("/tokenize", json={"content": TEXT}).json()["tokens"]

    assert tokens and all(isinstance(t, int) for t in tokens)
    answer = http.post("/detokenize", json={"tokens": tokens})
    assert answer.status_code == 200 and answer.json() == {"content": TEXT}


def test_with_pieces_gives_each_token_text_or_bytes(http):
    tokens = http.post("/tokenize", json={"content": TEXT, "with_pieces": True}).json()["tokens"]
    ids = http.post("/tokenize", json={"content": TEXT}).json()["tokens"]

    assert [t["id"] for t in tokens] == ids
    joined = b"".join(
        t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"]) for t in tokens
    )
    assert joined.decode() == TEXT
    # the Japanese part has tokens that are part of a character: llama.cpp sends those as bytes
    assert any(isinstance(t["piece"], list) for t in tokens)
    assert isinstance(tokens[0]["piece"], str)


def test_special_tokens_are_parsed_unless_told_not_to(http):
    special = http.post("/tokenize", json={"content": "<|im_end|>"}).json()["tokens"]
    plain = http.post("/tokenize", json={"content": "<|im_end|>", "parse_special": False}).json()["tokens"]

    assert len(special) == 1 and len(plain) > 1
    pieces = http.post("/tokenize", json={"content": "<|im_end|>", "with_pieces": True}).json()["tokens"]
    assert pieces == [{"id": special[0], "piece": "<|im_end|>"}]
    assert http.post("/detokenize", json={"tokens": special}).json() == {"content": "<|im_end|>"}


def test_add_special_adds_only_what_the_model_wants(http):
    without = http.post("/tokenize", json={"content": "Hi"}).json()["tokens"]
    with_special = http.post("/tokenize", json={"content": "Hi", "add_special": True}).json()["tokens"]

    assert with_special[-len(without) :] == without and len(with_special) - len(without) in (0, 1)


def test_model_is_optional_but_checked(http, model_name):
    assert http.post("/tokenize", json={"content": "Hi", "model": model_name}).status_code == 200
    answer = http.post("/tokenize", json={"content": "Hi", "model": "nope"})
    assert answer.status_code == 404 and answer.json()["error"]["param"] == "model"


def test_bad_input_is_a_400_naming_the_field(http):
    cases = [
        ("/detokenize", {"tokens": [1, 10**9]}, "tokens[1]"),
        ("/detokenize", {"tokens": [-1]}, "tokens[0]"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": "Hi", "with_peices": True}, "with_peices"),
    ]
    for path, body, field in cases:
        answer = http.post(path, json=body)
        assert answer.status_code == 400, (path, body, answer.text)
        error = answer.json()["error"]
        assert error["param"] == field and error["type"] == "invalid_request_error", error
