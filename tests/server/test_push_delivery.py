"""The batching engine's streams run on the server's event loop: while many streams (and several
choices each) are answered, no thread but the server's own runs generation code; the rows of one
/invocations `predict` run at once there too."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

import llmflow.generation
from llmflow.server import ServedModel
from tests.server.conftest import TIMEOUT_S, running

GENERATION_FILE = str(Path(llmflow.generation.__file__))


def threads_in_generation_code() -> set[str]:
    """The names of the threads whose stack holds a frame of `llmflow/generation.py` right now."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = set()
    for ident, frame in sys._current_frames().items():
        try:
            while frame is not None:
                if frame.f_code.co_filename == GENERATION_FILE:
                    found.add(names.get(ident, str(ident)))
                    break
                frame = frame.f_back
        except AttributeError:  # a frame of a running thread torn down while it was read: look again
            continue
    return found


@contextmanager
def watching(served) -> Iterator[tuple[set[str], list[int]]]:
    """The threads seen in generation code meanwhile, and how many sequences the engine decoded
    at each look (a batching engine's; none for another)."""
    seen: set[str] = set()
    decoding: list[int] = []
    done = threading.Event()
    engine = served.llm.engine

    def sample() -> None:
        while not done.is_set():
            seen.update(threads_in_generation_code())
            stats = engine.stats()
            if stats is not None:
                decoding.append(stats.running)
            done.wait(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield seen, decoding
    finally:
        done.set()
        sampler.join()


def threads_running_generations(served, streams: int, max_tokens: int) -> tuple[set[str], str]:
    """The threads seen in generation code while `streams` streams of two choices each are
    answered by a server of `served`, and the name of the server's own (event loop) thread."""
    body = {
        "model": served.name,
        "messages": [{"role": "user", "content": "Count from one to fifty in words."}],
        "max_tokens": max_tokens,
        "temperature": 0.7,
        "seed": 1,
        "n": 2,
        "stream": True,
    }
    with running(served) as server:

        def stream(_: int) -> str:
            with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
                return http.post("/v1/chat/completions", json=body).text

        with watching(served) as (seen, _), ThreadPoolExecutor(streams) as pool:
            answers = list(pool.map(stream, range(streams)))
    for answer in answers:
        assert answer.rstrip().endswith("data: [DONE]"), answer[-300:]
        assert '"index":1' in answer and '"finish_reason":"' in answer
    return seen, f"llmflow-serve-{server.port}"


def test_streams_and_choices_run_on_the_event_loop_with_no_thread_each(default_served):
    seen, loop_thread = threads_running_generations(default_served, streams=6, max_tokens=48)
    assert seen <= {loop_thread}, seen  # the loop's thread (when caught at it), and no other


def test_an_engine_that_computes_in_its_reader_runs_in_worker_threads(embedded_llm):
    """The probe above sees threads: the one-at-a-time engine's generations run in workers."""
    served = ServedModel.from_llm(embedded_llm)
    seen, loop_thread = threads_running_generations(served, streams=2, max_tokens=8)
    assert seen - {loop_thread}, seen


def test_the_rows_of_one_predict_decode_together_on_the_event_loop(default_served):
    """/invocations `predict`: one request's rows are generated at once (the engine decodes
    several of them in one step), with no thread each."""
    rows = 4
    prompts = [[f"Count from {word} to fifty in words."] for word in ("one", "two", "three", "four")]
    params = {"max_tokens": 32, "temperature": 0.7, "seed": 1, "details": True}
    body = {"dataframe_split": {"columns": ["prompt"], "data": prompts}, "params": params}
    with (
        running(default_served) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
        watching(default_served) as (seen, decoding),
    ):
        response = http.post("/invocations", json=body)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == rows and all(p["usage"]["completion_tokens"] > 0 for p in predictions)
    assert max(decoding) >= 2, decoding  # several rows in one step: they ran at once
    assert seen <= {f"llmflow-serve-{server.port}"}, seen
