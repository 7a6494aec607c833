"""Images into the MLflow model: an `images` input beside `prompt` (or `messages`), and chat
`messages` with OpenAI's `image_url` parts, through `predict` and `predict_stream` of a model
loaded by `mlflow.pyfunc.load_model` (so MLflow's own schema enforcement sees them first).

A text-only model (the embedded one) refuses an image by its field; the tiny vision model
(`vision_model`, llama.cpp with its projector) reads it: its prompt is longer by the image's
tokens (at least `image_tokens`: a model may wrap them in text), which is how these tests know
the image reached the model."""

from __future__ import annotations

import base64

import httpx
import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException

import llmflow.mlflow
from llmflow.errors import InvalidImage, InvalidRequest, UnsupportedInput
from llmflow.mlflow.inputs import parse_rows
from llmflow.types import ImageRef, Message
from tests.media.images import (
    assert_loads_reading_images,
    data_uri,
    image_bytes,
    need_mtmd,
    vision_load_options,
)

PNG = image_bytes(size=(64, 64))
B64 = base64.b64encode(PNG).decode()
URI = data_uri(PNG)
#: greedy, and short: only the prompt's length is checked
PARAMS = {"max_tokens": 2, "temperature": 0.0}


def _parts(*parts: object) -> list[dict]:
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


# -- parsing: no model needed --


def test_images_go_before_the_prompt_in_one_user_turn():
    [row] = parse_rows({"prompt": "Describe.", "images": [B64, URI]})
    assert row == [
        Message(
            "user",
            "Describe.",
            parts=(ImageRef("input.images[0]", base64=B64), ImageRef("input.images[1]", URI), "Describe."),
        )
    ]


def test_images_attach_to_the_last_user_message():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": _parts("And this?")},
    ]
    [row] = parse_rows({"messages": messages, "images": [PNG]})
    assert [m.images for m in row[:3]] == [(), (), ()]
    assert row[3].parts == (ImageRef("input.images[0]", data=PNG), "And this?")
    assert row[3].content == "And this?"


def test_an_images_column_beside_a_prompt_column():
    """Columns (MLflow's `inputs` body) and a DataFrame whose cells hold bytes, one image or a list."""
    first, second, third = parse_rows({"prompt": ["a", "b", "c"], "images": [[B64], None, URI]})
    assert first[0].images == (ImageRef("input[0].images[0]", base64=B64),)
    assert second == "b"
    assert third[0].images == (ImageRef("input[2].images[0]", URI),)
    frame = pd.DataFrame({"prompt": ["a", "b", "c"], "images": [[PNG, PNG], PNG, np.array([B64])]})
    assert [len(row[0].images) for row in parse_rows(frame)] == [2, 1, 1]
    [row] = parse_rows({"prompt": np.array("a"), "images": np.array(B64)})  # numpy scalars
    assert row[0].images == (ImageRef("input.images[0]", base64=B64),)


def test_a_trace_records_how_many_images_not_their_bytes():
    from llmflow.mlflow.observed_calls import row_inputs

    [row] = parse_rows({"prompt": "Describe.", "images": [B64, PNG]})
    assert row_inputs(row) == {"messages": [{"role": "user", "content": "Describe.", "images": 2}]}


@pytest.mark.parametrize(
    ("model_input", "field", "says"),
    [
        ({"prompt": "a", "images": [7]}, "input.images[0]", "not int"),
        ({"prompt": "a", "images": [B64, None]}, "input.images[1]", "not NoneType"),
        ({"prompt": "a", "images": 7}, "input.images", "must be a list of images"),
        ({"images": [B64]}, "input", "no `prompt` and no `messages`"),
        (
            {"messages": [{"role": "system", "content": "x"}], "images": [B64]},
            "input.images",
            "no user message",
        ),
        ({"prompt": "a", "images": ["ftp://host/a.png"]}, "input.images[0]", "data URI"),
    ],
)
def test_bad_images_name_their_field(model_input, field, says):
    with pytest.raises(InvalidRequest) as caught:
        parse_rows(model_input)
    assert caught.value.param == field
    assert says in str(caught.value)


# -- a text-only model, as MLflow loads it --


def test_a_text_only_model_refuses_an_image_by_its_field(loaded):
    with pytest.raises(MlflowException, match=r"input\.images\[0\]: the model .* takes no images"):
        next(iter(loaded.predict_stream({"prompt": "Describe.", "images": [B64]}, params=PARAMS)))
    with pytest.raises(MlflowException) as caught:
        loaded.predict({"prompt": "Describe.", "images": [PNG]}, params=PARAMS)
    error = caught.value.error  # type: ignore[attr-defined]
    assert isinstance(error, UnsupportedInput) and error.param == "input.images[0]"
    chat = {"messages": [{"role": "user", "content": _parts("What is it?", _image_part(URI))}]}
    with pytest.raises(MlflowException, match=r"messages\[0\]\.content\[1\]: the model .* takes no images"):
        loaded.predict(chat, params=PARAMS)


def test_a_text_only_model_answers_rows_without_images_beside_refused_ones(loaded):
    frame = pd.DataFrame({"prompt": ["Hi.", "Describe."], "images": [None, [PNG]]})
    first, second = loaded.predict(frame, params={**PARAMS, "result": "struct"})
    assert first["error"] == "" and first["completion_tokens"] >= 1
    assert second["finish_reason"] == "error" and "takes no images" in second["error"]


def test_a_text_only_model_refuses_an_image_over_http_with_a_400(loaded):
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server

    body = {"inputs": {"prompt": "Describe.", "images": [B64]}, "params": PARAMS}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", "false")  # init() sets it; restored after
        with TestClient(scoring_server.init(loaded)) as http:
            response = http.post("/invocations", json=body)
    assert response.status_code == 400
    assert "input.images[0]: the model" in response.text and "takes no images" in response.text


def test_the_seed_interface_still_streams(loaded):
    chunks = list(loaded.predict_stream({"prompt": "Hi."}, params=PARAMS))
    assert chunks[-1]["finish_reason"] in ("stop", "length")


# -- a model that reads images --


@pytest.fixture(scope="module")
def vision(vision_model, tmp_path_factory):
    """The tiny vision model saved as an MLflow model (by reference) and loaded back by MLflow;
    `(model, image_tokens)`."""
    need_mtmd()
    folder, summary = vision_model
    saved = tmp_path_factory.mktemp("vision-mlflow") / "model"
    model, options = vision_load_options(folder)
    llmflow.mlflow.save_model(saved, model, by_reference=True, default_params=PARAMS, **options)
    loaded = mlflow.pyfunc.load_model(str(saved))
    yield loaded, summary["image_tokens"]
    llm = llmflow.mlflow.find_llm(loaded)
    if llm is not None:
        llm.close()


def _stream_prompt_tokens(model, model_input) -> int:
    chunks = list(model.predict_stream(model_input, params=PARAMS))
    return chunks[-1]["usage"]["prompt_tokens"]


def test_images_reach_the_model_through_predict_stream(vision):
    """An image adds at least its positions in the text model (a model may wrap them in text
    tokens, or add a tile beside the overview), and two images add twice what one adds."""
    model, image_tokens = vision
    plain = _stream_prompt_tokens(model, {"prompt": "Describe."})
    one = _stream_prompt_tokens(model, {"prompt": "Describe.", "images": [B64]}) - plain
    assert one >= image_tokens
    assert _stream_prompt_tokens(model, {"prompt": "Describe.", "images": [URI, PNG]}) == plain + 2 * one


def test_image_parts_and_bytes_cells_reach_the_model_through_predict(vision):
    model, image_tokens = vision
    details = {**PARAMS, "details": True}
    text_only = {"messages": [{"role": "user", "content": _parts("What is it?")}]}
    with_image = {"messages": [{"role": "user", "content": _parts(_image_part(URI), "What is it?")}]}
    [plain] = model.predict(text_only, params=details)
    [seen] = model.predict(with_image, params=details)
    assert seen["usage"]["prompt_tokens"] >= plain["usage"]["prompt_tokens"] + image_tokens
    frame = pd.DataFrame({"prompt": ["Describe.", "Describe."], "images": [None, [PNG]]})
    without, with_one = model.predict(frame, params=details)
    assert with_one["usage"]["prompt_tokens"] >= without["usage"]["prompt_tokens"] + image_tokens


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("not base64!", "is not valid base64"),
        (base64.b64encode(b"plain text").decode(), "is not an image in a supported format"),
        (b"plain text", "is not an image in a supported format"),
        ("https://example.com/a.png", "image URLs are fetched only by a server"),
    ],
)
def test_a_bad_image_is_refused_by_its_field(vision, image, says):
    model, _ = vision
    with pytest.raises(MlflowException, match=rf"input\.images\[1\]: {says}"):
        next(iter(model.predict_stream({"prompt": "Describe.", "images": [PNG, image]}, params=PARAMS)))
    with pytest.raises(MlflowException) as caught:
        model.predict({"prompt": "Describe.", "images": [PNG, image]}, params=PARAMS)
    error = caught.value.error  # type: ignore[attr-defined]
    assert isinstance(error, InvalidImage) and error.param == "input.images[1]"


# -- over HTTP: MLflow's scoring server and llmflow's own, the same bodies --


@pytest.fixture(scope="module")
def vision_http(vision):
    """The vision model behind MLflow's scoring server (in process) and `llmflow serve`."""
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server

    from llmflow.server import ServedModel
    from tests.server.conftest import TIMEOUT_S, running

    model, image_tokens = vision
    with (
        pytest.MonkeyPatch.context() as patch,
        running(ServedModel.from_pyfunc(model, "vlm")) as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as llmflow_client,
    ):
        patch.setenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", "false")  # init() sets it; restored after
        with TestClient(scoring_server.init(model)) as mlflow_client:
            yield {"mlflow": mlflow_client, "llmflow": llmflow_client}, image_tokens


def _prompt_tokens(response) -> list[int]:
    assert response.status_code == 200, response.text
    return [answer["usage"]["prompt_tokens"] for answer in response.json()["predictions"]]


@pytest.mark.parametrize("server", ["mlflow", "llmflow"])
def test_images_over_http_in_every_body_format(vision_http, server):
    clients, image_tokens = vision_http
    http = clients[server]
    params = {**PARAMS, "details": True}
    [plain] = _prompt_tokens(
        http.post("/invocations", json={"inputs": {"prompt": "Describe."}, "params": params})
    )
    [one] = _prompt_tokens(
        http.post("/invocations", json={"inputs": {"prompt": "Describe.", "images": [B64]}, "params": params})
    )
    assert one >= plain + image_tokens
    columns = {"prompt": ["Describe.", "Describe."], "images": [[B64], [URI]]}
    assert _prompt_tokens(http.post("/invocations", json={"inputs": columns, "params": params})) == [one, one]
    records = [{"prompt": "Describe.", "images": [URI]}, {"prompt": "Describe."}]
    body = {"dataframe_records": records, "params": params}
    assert _prompt_tokens(http.post("/invocations", json=body)) == [one, plain]
    bad = {"inputs": {"prompt": "Describe.", "images": ["not base64!"]}, "params": params}
    response = http.post("/invocations", json=bad)
    assert response.status_code == 400 and "input.images[0]" in response.text


def test_a_logged_vision_model_carries_its_projector(vision_model, tmp_path):
    """Saved with its weights, the projector the engine option named is an artifact too: the
    model's config names no local file, and the model loaded back reads images."""
    need_mtmd()
    folder, _ = vision_model
    model, options = vision_load_options(folder)
    saved = tmp_path / "model"
    llmflow.mlflow.save_model(saved, model, **options)
    assert (saved / "artifacts" / "projector" / "mmproj-vision-f16.gguf").is_file()
    config = mlflow.models.Model.load(str(saved)).flavors["python_function"]["config"]
    assert config["projector"] == "artifacts/projector/mmproj-vision-f16.gguf"
    assert "mmproj" not in config["engine_options"]
    assert_loads_reading_images(saved)


def test_a_missing_projector_is_refused_when_the_model_is_saved(tmp_path):
    with pytest.raises(InvalidRequest) as error:
        llmflow.mlflow.save_model(
            tmp_path / "model", engine="llama_cpp", engine_options={"mmproj": str(tmp_path / "nowhere.gguf")}
        )
    assert error.value.problems[0].field == "engine_options.mmproj"
