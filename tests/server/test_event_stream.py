"""The SSE response of llmflow's own: events and pings share one connection, so nothing may be
sent after the last body message (uvicorn raises, and the request is logged as a server error).
Seen when a ping's timer fired just as the last event went out: anyio delivers a cancellation to a
task whose wait has already ended only later, so the ping still ran its send."""

from __future__ import annotations

import asyncio
import random

from llmflow.server.event_stream import PING, EventStream


async def _one_response(events: list[bytes], rng: random.Random) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        await asyncio.sleep(rng.choice([0, 0, 1e-4]))  # a real send may wait (flow control)
        if sent and sent[-1]["type"] == "http.response.body" and not sent[-1]["more_body"]:
            raise RuntimeError(
                f"Unexpected ASGI message {message['type']!r} sent, after response already completed."
            )
        sent.append(message)

    async def receive() -> dict:
        await asyncio.Event().wait()  # the client stays
        return {"type": "http.disconnect"}

    async def produce():
        for data in events:
            await asyncio.sleep(rng.choice([0, 1e-4]))
            yield data

    closed = []
    await EventStream(produce(), lambda: closed.append(True), ping_interval_s=1e-4)({}, receive, send)
    assert closed == [True]
    return sent


def test_no_ping_after_the_last_event_even_when_pings_are_due_all_the_time():
    rng = random.Random(0)
    for _ in range(300):
        sent = asyncio.run(_one_response([b"data: 1\n\n", b"data: 2\n\n"], rng))
        bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
        assert [b for b in bodies if b != PING] == [b"data: 1\n\n", b"data: 2\n\n", b""]
        assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
