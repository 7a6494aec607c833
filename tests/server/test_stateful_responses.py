"""Stateful Responses on `llmflow serve`, through the official `openai` client and the OpenAI Agents
SDK: a response is kept unless `store` is false; `previous_response_id` continues it (its input
and output before the new input); `retrieve`, `delete` and `input_items.list` read and drop it; an
unknown id is a 404 naming the field; a sqlite store keeps them across a restart.

The embedded model's words differ between machines: the tests check what was kept and sent,
never what the model said."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pydantic
import pytest

from tests.extras import need
from tests.server.conftest import TIMEOUT_S, running

SHORT = {"max_output_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def url(default_served) -> Iterator[str]:
    with running(default_served) as server:
        yield server.url


def client_of(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)


@pytest.fixture
def client(url) -> openai.OpenAI:
    return client_of(url)


def texts(items) -> list[tuple[str, str]]:
    """(role, text) of each message item."""
    return [
        (item.role, "".join(part.text for part in item.content)) for item in items if item.type == "message"
    ]


def test_previous_response_id_continues_the_kept_conversation(client, default_served):
    model = default_served.name
    first = client.responses.create(model=model, input="My name is Ada.", instructions="Be brief.", **SHORT)
    assert first.store is True and first.previous_response_id is None
    second = client.responses.create(
        model=model, input="What is my name?", previous_response_id=first.id, **SHORT
    )
    assert second.previous_response_id == first.id and second.instructions is None
    # the second turn's prompt held the first turn, its answer, then the new input
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    items = list(client.responses.input_items.list(second.id, order="asc"))
    assert texts(items) == [
        ("user", "My name is Ada."),
        ("assistant", first.output_text),
        ("user", "What is my name?"),
    ]
    assert items[1].id == first.output[0].id  # the first answer's own item
    kept = client.responses.retrieve(second.id)
    assert kept.model_dump() == second.model_dump()


def test_a_streamed_response_is_kept_too(client, default_served):
    events = list(client.responses.create(model=default_served.name, input="Say hi.", stream=True, **SHORT))
    final = events[-1].response  # response.completed or, cut by max_output_tokens, response.incomplete
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_store_false_is_not_kept(client, default_served):
    response = client.responses.create(model=default_served.name, input="Hi", store=False, **SHORT)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model=default_served.name, input="Hi", previous_response_id=response.id)
    assert unknown.value.body["param"] == "previous_response_id"


def test_delete_drops_it_and_unknown_ids_are_404_naming_the_field(client, default_served):
    response = client.responses.create(model=default_served.name, input="Hi", **SHORT)
    client.responses.delete(response.id)
    for call in (
        lambda: client.responses.retrieve(response.id),
        lambda: client.responses.delete(response.id),
        lambda: client.responses.input_items.list(response.id),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert missing.value.body["param"] == "response_id"
        assert missing.value.body["code"] == "response_not_found"


def test_input_items_page_as_openai_pages_them(client, default_served):
    conversation = [{"role": "user", "content": f"Message {i}."} for i in range(5)]
    response = client.responses.create(model=default_served.name, input=conversation, **SHORT)
    newest_first = client.responses.input_items.list(response.id, limit=2)
    assert texts(newest_first.data) == [("user", "Message 4."), ("user", "Message 3.")]
    assert newest_first.has_more and newest_first.last_id == newest_first.data[-1].id
    every = list(client.responses.input_items.list(response.id, limit=2, order="asc"))  # follows `after`
    assert texts(every) == [("user", f"Message {i}.") for i in range(5)]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.input_items.list(response.id, limit=101)
    assert refused.value.body["param"] == "limit"


def test_a_sqlite_store_keeps_responses_across_a_restart(default_served, tmp_path):
    path = tmp_path / "responses.db"
    with running(default_served, response_store=str(path)) as server:
        client = client_of(server.url)
        first = client.responses.create(model=default_served.name, input="Remember: blue.", **SHORT)
    with running(default_served, response_store=str(path)) as server:
        client = client_of(server.url)
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
        second = client.responses.create(
            model=default_served.name, input="Which colour?", previous_response_id=first.id, **SHORT
        )
        items = list(client.responses.input_items.list(second.id, order="asc"))
    assert texts(items)[0] == ("user", "Remember: blue.") and texts(items)[-1] == ("user", "Which colour?")


def test_the_store_is_bounded(default_served):
    with running(default_served, response_store_max=2) as server:
        client = client_of(server.url)
        ids = [client.responses.create(model=default_served.name, input="Hi", **SHORT).id for _ in range(3)]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(ids[0])  # the least recently used went
        assert [client.responses.retrieve(i).id for i in ids[1:]] == ids[1:]


class Reply(pydantic.BaseModel):
    """The agent's answer: bounded structured output, so that it ends on any machine."""

    reply: str = pydantic.Field(max_length=40)


def test_the_agents_sdk_chains_two_turns_with_previous_response_id(url, default_served):
    sdk = need("agents", "test")
    sdk.set_tracing_disabled(True)  # the SDK would send its traces to OpenAI
    sent: list[dict] = []

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)
        original = client.responses.create

        async def create(**kwargs):  # what the SDK sends, to check the chaining
            sent.append(kwargs)
            return await original(**kwargs)

        client.responses.create = create  # type: ignore[method-assign]
        agent = sdk.Agent(
            name="Assistant",
            instructions="Reply with one short sentence.",
            model=sdk.OpenAIResponsesModel(model=default_served.name, openai_client=client),
            model_settings=sdk.ModelSettings(max_tokens=128, temperature=0),
            output_type=Reply,
        )
        first = await sdk.Runner.run(agent, "My name is Ada.")
        second = await sdk.Runner.run(agent, "What is my name?", previous_response_id=first.last_response_id)
        assert isinstance(first.final_output, Reply) and isinstance(second.final_output, Reply)
        assert sent[1]["previous_response_id"] == first.last_response_id != second.last_response_id
        kept = await client.responses.input_items.list(second.last_response_id, order="asc")
        (user, said), (assistant, answer), (user_again, asked) = texts(kept.data)
        assert (user, said, user_again, asked) == ("user", "My name is Ada.", "user", "What is my name?")
        assert assistant == "assistant" and Reply.model_validate_json(answer) == first.final_output

    asyncio.run(run())
