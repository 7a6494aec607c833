"""The batch scheduler with images in prompts, without a model: the simulated backend of
`test_scheduler.py`, whose images are encoded when a test says so. An image is evaluated whole,
after its encoding, in a pass of its own; while it is being encoded the other streams go on; a
kept prefix never ends inside an image."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from llmflow.engines.base import token_request
from llmflow.engines.scheduler import BatchScheduler
from llmflow.errors import EngineFailed
from llmflow.media.prompt import MediaPrompt, PromptImage, image_ids
from llmflow.types import CancelToken, Image, PromptReuse
from tests.engines.test_scheduler import CHUNK, EOS, SimBackend, alone, params, prompt, settle


def picture(name: str) -> Image:
    return Image(field=f"messages[0].content[{name}]", data=name.encode(), format="png", width=1, height=1)


def with_image(head: list[int], image: Image, tail: list[int], n: int = 5) -> MediaPrompt:
    ids = [*head, *image_ids(image, n), *tail]
    return MediaPrompt(ids, [PromptImage(len(head), n, image)])


class ImageBackend(SimBackend):
    """Images go into a sequence as their ids (so the next token depends on them, as on any
    token); each encoding is a future the test completes, or completes at once with `instant`."""

    def __init__(self, parallel: int, instant: bool = True):
        super().__init__(parallel)
        self.instant = instant
        self.encodings: list[tuple[PromptImage, Future]] = []
        self.image_passes: list[tuple[int, int]] = []
        self.fail_image: str | None = None

    def encode_image(self, image: PromptImage) -> Future:
        future: Future = Future()
        self.encodings.append((image, future))
        if self.instant:
            self.release(image, future)
        return future

    def release(self, image: PromptImage, future: Future) -> None:
        if self.fail_image == image.image.field:
            future.set_exception(EngineFailed("could not encode"))
        else:
            future.set_result(("encoded", image.image.sha256))

    def decode_image(self, seq: int, image: PromptImage, encoded) -> None:
        assert encoded == ("encoded", image.image.sha256)
        assert image.start == len(self.kv[seq]), "an image must continue its sequence"
        self.kv[seq].extend(image_ids(image.image, image.n_tokens, image.part))
        self.image_passes.append((seq, image.start))


def scheduler_with_images(instant=True, parallel=4, one_pass=False, reuse_tokens=True):
    backend = ImageBackend(parallel, instant)
    scheduler = BatchScheduler(
        backend,
        parallel=parallel,
        n_ctx=256,
        n_batch=64,
        prefill_chunk=CHUNK,
        eos_token_ids={EOS},
        one_pass=one_pass,
        reuse_tokens=reuse_tokens,
    )
    return backend, scheduler


def generate(scheduler, ids, max_tokens=12, seed=0, reuse=None):
    request = token_request(ids, params(max_tokens, seed), CancelToken(), scheduler.n_ctx, reuse=reuse)
    return scheduler.generate(request)


@pytest.mark.parametrize("one_pass", [False, True])
def test_an_image_is_evaluated_whole_and_the_answer_matches_running_alone(one_pass):
    backend, scheduler = scheduler_with_images(one_pass=one_pass)
    try:
        ids = with_image(prompt(1, 11), picture("a"), prompt(2, 20))
        others = [prompt(i, 30) for i in range(3, 6)]
        streams = [generate(scheduler, ids)] + [generate(scheduler, p) for p in others]
        answers = [list(s) for s in streams]
        assert answers[0] == alone(list(ids), 12)
        assert answers[1:] == [alone(p, 12) for p in others]
        assert [start for _, start in backend.image_passes] == [11]
    finally:
        scheduler.close()


def test_other_streams_go_on_while_an_image_is_encoded():
    backend, scheduler = scheduler_with_images(instant=False)
    try:
        running = generate(scheduler, prompt(7, 9), max_tokens=200)
        assert next(running) is not None  # decoding
        ids = with_image(prompt(1, 4), picture("slow"), prompt(2, 6))
        waiting = generate(scheduler, ids)
        got = []
        reader = threading.Thread(target=lambda: got.extend(waiting))
        reader.start()
        # the reader thread submits the request when it first reads: wait for its image's encoding
        deadline = time.monotonic() + 10
        while not backend.encodings and time.monotonic() < deadline:
            time.sleep(0.001)
        for _ in range(20):  # the running stream keeps flowing while the image waits
            next(running)
        assert not got and backend.image_passes == []
        image, future = backend.encodings[0]
        backend.release(image, future)
        reader.join(timeout=10)
        assert got == alone(list(ids), 12)
        running.close()
        settle(scheduler)
    finally:
        scheduler.close()


def test_an_image_that_cannot_be_encoded_ends_only_its_own_request():
    backend, scheduler = scheduler_with_images()
    backend.fail_image = picture("bad").field
    try:
        bad = generate(scheduler, with_image(prompt(1, 4), picture("bad"), prompt(2, 6)))
        good = generate(scheduler, prompt(3, 10))
        with pytest.raises(EngineFailed, match="could not encode"):
            list(bad)
        assert list(good) == alone(prompt(3, 10), 12)
        settle(scheduler)
    finally:
        scheduler.close()


@pytest.mark.parametrize("reuse_tokens", [True, False])
def test_a_kept_prefix_never_ends_inside_an_image(reuse_tokens):
    """The same conversation with another image at the same place reuses the text before it
    only; with the same image it reuses the image too."""
    _, scheduler = scheduler_with_images(reuse_tokens=reuse_tokens, parallel=1)
    head, tail = prompt(1, 2 * CHUNK + 3), prompt(2, 2 * CHUNK)
    try:
        first = with_image(head, picture("a"), tail, n=CHUNK)
        assert list(generate(scheduler, first)) == alone(list(first), 12)
        for image, at_least in ((picture("a"), len(head) + CHUNK), (picture("b"), None)):
            ids = with_image(head, image, tail, n=CHUNK)
            reuse = PromptReuse()
            assert list(generate(scheduler, ids, reuse=reuse)) == alone(list(ids), 12)
            if at_least is None:
                assert reuse.cached_tokens <= len(head)
            else:
                assert reuse.cached_tokens >= at_least
            assert reuse.cached_tokens <= len(head) or reuse.cached_tokens >= len(head) + CHUNK
    finally:
        scheduler.close()


def test_choices_of_a_prompt_with_an_image_copy_it_once():
    backend, scheduler = scheduler_with_images()
    try:
        ids = with_image(prompt(1, 5), picture("a"), prompt(2, 9))
        n_ctx = scheduler.n_ctx
        requests = [token_request(ids, params(10, seed), CancelToken(), n_ctx) for seed in (1, 2, 3)]
        answers = [list(s) for s in scheduler.generate_group(requests)]
        assert answers == [alone(list(ids), 10, seed) for seed in (1, 2, 3)]
        assert len(backend.image_passes) == 1
        assert len(backend.encodings) == 1
    finally:
        scheduler.close()


def test_a_waiting_image_does_not_hold_back_a_request_behind_it():
    """Two requests arrive together; the first waits for its image, the second (text only)
    starts and finishes meanwhile."""
    backend, scheduler = scheduler_with_images(instant=False)
    try:
        ids = with_image(prompt(1, 4), picture("slow"), prompt(2, 6))
        blocked = generate(scheduler, ids)
        done: list[int] = []
        reader = threading.Thread(target=lambda: done.extend(blocked))
        reader.start()
        assert list(generate(scheduler, prompt(5, 12))) == alone(prompt(5, 12), 12)
        time.sleep(0.05)
        assert not done
        backend.release(*backend.encodings[0])
        reader.join(timeout=10)
        assert done == alone(list(ids), 12)
    finally:
        scheduler.close()


def test_each_image_is_encoded_once_per_request():
    backend, scheduler = scheduler_with_images()
    try:
        for k in range(20):  # the scheduler thread places each request as it arrives
            ids = with_image(prompt(k, 4), picture(f"p{k}"), prompt(k + 1, 6))
            list(generate(scheduler, ids, max_tokens=2))
        assert len(backend.encodings) == 20
    finally:
        scheduler.close()
