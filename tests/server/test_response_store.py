"""The response store on its own: bounded by count and bytes, least recently used out first, kept
in a sqlite file across restarts; and the input items' list pages as OpenAI pages them."""

from __future__ import annotations

import pytest

from llmflow.errors import InvalidRequest
from llmflow.responses.items import input_items
from llmflow.server.response_store import ResponseStore, StoredResponse
from llmflow.server.responses import item_page


def stored(response_id: str, text: str = "hi") -> StoredResponse:
    output = [{"id": f"msg_{response_id}", "type": "message", "role": "assistant", "content": []}]
    response = {"id": response_id, "object": "response", "output": output}
    return StoredResponse(response, input_items(text))


@pytest.fixture(params=["memory", "sqlite"])
def store_at(request, tmp_path):
    """A store maker: in memory, or in a sqlite file under tmp_path (the same file each time)."""
    path = tmp_path / "responses.db" if request.param == "sqlite" else None
    made: list[ResponseStore] = []

    def make(**bounds) -> ResponseStore:
        made.append(ResponseStore(path=path, **bounds))
        return made[-1]

    yield make
    for store in made:
        store.close()


def test_keeps_gets_and_deletes(store_at):
    store = store_at()
    kept = stored("resp_1")
    store.put(kept)
    got = store.get("resp_1")
    assert got == kept and got.input_items[0]["role"] == "user"
    assert got.conversation == [*got.input_items, *got.response["output"]]
    assert store.delete("resp_1") and store.get("resp_1") is None and not store.delete("resp_1")


def test_the_least_recently_used_go_first_beyond_the_count(store_at):
    store = store_at(max_count=2)
    store.put(stored("a"))
    store.put(stored("b"))
    assert store.get("a") is not None  # a is now more recent than b
    store.put(stored("c"))
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert len(store) == 2


def test_the_byte_bound_drops_old_ones_and_refuses_one_too_large(store_at):
    size = len(stored("x", "y" * 1000).to_json().encode())
    store = store_at(max_bytes=2 * size + size // 2)
    for name in "abc":
        store.put(stored(name, "y" * 1000))
    assert [store.get(name) is not None for name in "abc"] == [False, True, True]
    store.put(stored("huge", "y" * 10 * size))
    assert store.get("huge") is None and store.get("c") is not None


def test_a_sqlite_store_survives_a_restart_with_its_order(tmp_path):
    path = tmp_path / "kept" / "responses.db"
    first = ResponseStore(path=path)
    for name in "abc":
        first.put(stored(name))
    first.get("a")  # order now b, c, a
    first.close()
    again = ResponseStore(max_count=2, path=path)  # a smaller bound: the least recent goes
    assert again.get("b") is None and again.get("c").id == "c" and again.get("a").id == "a"
    again.close()


def test_input_items_have_ids_statuses_and_content_parts():
    [user] = input_items("Hello")
    assert user["type"] == "message" and user["role"] == "user" and user["status"] == "completed"
    assert user["id"].startswith("msg_") and user["content"] == [{"type": "input_text", "text": "Hello"}]
    items = input_items(
        [
            {"role": "assistant", "content": "Earlier."},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}], "id": "msg_mine"},
        ]
    )
    assert items[0]["content"] == [{"type": "output_text", "text": "Earlier.", "annotations": []}]
    assert items[1]["id"].startswith("fc_") and items[2]["id"].startswith("fco_")
    assert all(item["status"] == "completed" for item in items) and items[3]["id"] == "msg_mine"


ITEMS = [{"id": f"item_{i}"} for i in range(5)]


@pytest.mark.parametrize(
    ("after", "limit", "order", "ids", "has_more"),
    [
        (None, None, None, [4, 3, 2, 1, 0], False),  # newest first by default
        (None, "2", "asc", [0, 1], True),
        ("item_1", "2", "asc", [2, 3], True),
        ("item_2", None, "desc", [1, 0], False),
        ("item_4", None, "asc", [], False),
    ],
)
def test_input_item_pages(after, limit, order, ids, has_more):
    page = item_page(ITEMS, after, limit, order)
    assert [item["id"] for item in page["data"]] == [f"item_{i}" for i in ids]
    assert page["object"] == "list" and page["has_more"] is has_more
    assert (page["first_id"], page["last_id"]) == (
        (f"item_{ids[0]}", f"item_{ids[-1]}") if ids else (None, None)
    )


@pytest.mark.parametrize(
    ("after", "limit", "order", "param"),
    [
        ("nope", None, None, "after"),
        (None, "0", None, "limit"),
        (None, "x", None, "limit"),
        (None, None, "up", "order"),
    ],
)
def test_bad_page_requests_name_the_field(after, limit, order, param):
    with pytest.raises(InvalidRequest) as refused:
        item_page(ITEMS, after, limit, order)
    assert refused.value.param == param
