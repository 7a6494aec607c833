"""Images on the llama.cpp engines through a vision model's projector (`mmproj`): what is refused,
and how, before any image is read; then the project's tiny random SmolVLM on both engines: each
image's chunks take their positions, reach the model, are encoded once and kept with the
conversation, and the batching engine reads them as the other engine does."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from llmflow import LLM
from llmflow.errors import InvalidParams
from llmflow.media.prompt import media_images
from llmflow.model_files import default_model_path
from tests.media.images import data_uri, image_bytes


def test_a_missing_projector_file_is_an_error_naming_the_option(tmp_path):
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp", engine_options={"n_ctx": 256, "mmproj": str(tmp_path / "nowhere.gguf")})
    assert error.value.problems[0].field == "mmproj"


def test_a_file_that_is_no_projector_is_an_error_naming_the_option():
    """The text model given as its own projector: refused by llama.cpp's loader, or by a build
    without the multimodal library; either way the option is named and nothing is left loaded."""
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp", engine_options={"n_ctx": 256, "mmproj": str(default_model_path())})
    assert error.value.problems[0].field == "mmproj"


def test_the_batching_engine_refuses_a_projector():
    with pytest.raises(InvalidParams) as error:
        LLM.load(engine="llama_cpp_batched", engine_options={"mmproj": str(default_model_path())})
    assert error.value.problems[0].field == "mmproj"


# -- a vision model (the project's tiny random SmolVLM) through its projector --

ENGINES = ["llama_cpp", "llama_cpp_batched"]


def _vision(vision_model, engine: str, **options) -> LLM:
    folder, _ = vision_model
    engine_options = {"mmproj": str(folder / "mmproj-vision-f16.gguf"), "n_ctx": 512, **options}
    return LLM.load(str(folder / "vision-f16.gguf"), engine=engine, engine_options=engine_options)


def _asking(*images: bytes, text: str = "What is in the picture?") -> list[dict]:
    parts = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": data_uri(image)}} for image in images]
    return [{"role": "user", "content": parts}]


GREEDY = {"max_tokens": 6, "temperature": 0, "logprobs": 3}


@pytest.fixture(scope="module", params=ENGINES)
def vision_llm(request, vision_model):
    llm = _vision(vision_model, request.param)
    yield llm
    llm.close()


def test_each_image_takes_its_chunks_positions_in_the_prompt(vision_llm, vision_model):
    _, summary = vision_model
    assert vision_llm.engine.input_modalities == ("text", "image")
    without = vision_llm.prepare(_asking()).prompt_ids
    one = vision_llm.prepare(_asking(image_bytes())).prompt_ids
    two = vision_llm.prepare(_asking(image_bytes(), image_bytes(size=(9, 6)))).prompt_ids
    spans = media_images(two)
    assert spans and all(span.n_tokens == summary["image_tokens"] for span in spans)
    assert [span.image.field for span in spans][-1] == "messages[0].content[2]"
    per_image = len(one) - len(without)
    assert len(two) - len(without) == 2 * per_image  # the same wrapping, the same positions
    assert sum(span.n_tokens for span in media_images(one)) * 2 == sum(span.n_tokens for span in spans)
    final = list(vision_llm.stream(_asking(image_bytes()), GREEDY))[-1]
    assert final.usage.prompt_tokens == len(one)


def test_the_image_reaches_the_model(vision_llm):
    """Two images in the same place give other first-token logprobs (random weights: no text to
    expect, but the numbers depend on every pixel that reaches the model)."""
    colours = [(250, 0, 0), (0, 0, 250)]
    first = [_first_logprobs(vision_llm, _asking(image_bytes(color=c))) for c in colours]
    again = _first_logprobs(vision_llm, _asking(image_bytes(color=colours[0])))
    assert first[0] != first[1]
    assert again == pytest.approx(first[0], abs=1e-3)


def _first_logprobs(llm: LLM, messages: list[dict]) -> list[float]:
    chunks = list(llm.stream(messages, GREEDY))
    top = next(c for c in chunks if c.logprobs).logprobs[0].top
    return [t.logprob for t in top]


def test_a_resent_image_is_not_encoded_again(vision_llm):
    picture = image_bytes(size=(7, 7))
    list(vision_llm.stream(_asking(picture, text="Describe it."), GREEDY))
    before = vision_llm.engine.image_stats()
    # another conversation (no kept prefix reaches the image): the encoding is reused
    list(vision_llm.stream(_asking(picture, text="Name the colour."), GREEDY))
    after = vision_llm.engine.image_stats()
    assert after.encoded == before.encoded
    assert after.reused > before.reused
    assert after.bytes > 0


def test_the_next_turn_reuses_the_image_in_the_kept_conversation(vision_llm):
    messages = _asking(image_bytes(size=(6, 6)))
    list(vision_llm.stream(messages, GREEDY))
    turn = [*messages, {"role": "assistant", "content": "A square."}, {"role": "user", "content": "Sure?"}]
    final = list(vision_llm.stream(turn, GREEDY))[-1]
    spans = media_images(vision_llm.prepare(turn).prompt_ids)
    assert final.usage.cached_tokens >= spans[-1].end


def test_both_engines_read_an_image_alike(vision_model):
    """The same greedy answer and logprobs, one at a time and batched (same machine, same numbers:
    the batching engine evaluates an image into its sequence as the other does)."""
    answers = []
    for engine in ENGINES:
        llm = _vision(vision_model, engine)
        try:
            chunks = list(llm.stream(_asking(image_bytes(size=(5, 9))), GREEDY))
        finally:
            llm.close()
        answers.append(("".join(c.text for c in chunks), [t.logprob for c in chunks for t in c.logprobs]))
    assert answers[0][0] == answers[1][0]
    assert answers[0][1] == pytest.approx(answers[1][1], abs=1e-3)


def test_the_batching_engine_answers_images_beside_text_streams(vision_model):
    llm = _vision(vision_model, "llama_cpp_batched")
    try:
        with ThreadPoolExecutor(4) as pool:
            jobs = [
                pool.submit(lambda m=m: list(llm.stream(m, GREEDY)))
                for m in (
                    _asking(image_bytes(size=(4, 4))),
                    _asking(text="Tell me a story."),
                    _asking(image_bytes(size=(4, 5)), image_bytes(size=(5, 4))),
                    _asking(text="Count to ten."),
                )
            ]
            finals = [job.result(timeout=120)[-1] for job in jobs]
        assert all(f.usage.completion_tokens > 0 for f in finals)
    finally:
        llm.close()
