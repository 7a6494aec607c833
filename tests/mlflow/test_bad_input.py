"""Every kind of bad input gets an `MlflowException` that says what to fix, never a crash or a hang.

Some shapes are caught by MLflow's own schema enforcement (its message names the column), the
rest by llmflow (its message names the field). Streams fail at the first `next()` when called
through MLflow, and at the call itself on the python model.
"""

from __future__ import annotations

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from llmflow.errors import ContextLengthExceeded, InvalidMessages
from llmflow.mlflow import InvalidModelInput, LlmflowPyfuncModel, find_llm
from tests.mlflow.store import using

#: a PNG of one pixel, as a data URI
IMAGE_PART = {
    "type": "image_url",
    "image_url": {
        "url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8"
        "DwHwAFBQIAX8"
        "jx0gAAAABJRU5ErkJggg=="
    },
}
BAD_INPUTS = [
    pytest.param({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "not both", id="both"),
    pytest.param({"prompt": 5}, "prompt", id="prompt-not-a-string"),
    pytest.param({"messages": "hello"}, "messages", id="messages-not-a-list"),
    pytest.param({"messages": []}, "at least one message", id="empty-messages"),
    pytest.param({"messages": [{"role": "wizard", "content": "x"}]}, "wizard", id="unknown-role"),
    pytest.param({"messages": [{"role": "user"}]}, "content", id="message-without-content"),
    pytest.param({"messages": [{"role": "user", "content": 3}]}, "content", id="content-not-a-string"),
    pytest.param(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, IMAGE_PART]}]},
        r"messages\[0\]\.content\[1\]: the model .* takes no images",
        id="an-image-for-a-text-only-model",
    ),
    pytest.param(
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        r"messages\[0\]\.content\[0\]",
        id="an-unknown-content-part",
    ),
]

BAD_PARAMS = [
    pytest.param({"temperature": "hot"}, "temperature", id="wrong-type"),
    pytest.param({"max_tokens": 0}, "max_tokens", id="out-of-range"),
    pytest.param({"top_p": 1.5}, "top_p", id="top_p-above-1"),
    pytest.param({"stop_sequences": "x"}, "stop_sequences", id="stop_sequences-not-a-list"),
    pytest.param("max_tokens=3", "dictionary", id="params-not-a-dict"),
]


@pytest.mark.parametrize(("model_input", "says"), BAD_INPUTS)
def test_bad_input_to_predict(loaded, model_input, says):
    with pytest.raises(MlflowException, match=says):
        loaded.predict(model_input, params={"max_tokens": 2})


@pytest.mark.parametrize(("model_input", "says"), BAD_INPUTS)
def test_bad_input_to_predict_stream(loaded, model_input, says):
    with pytest.raises(MlflowException, match=says):
        next(loaded.predict_stream(model_input, params={"max_tokens": 2}))


@pytest.mark.parametrize("model_input", [{}, {"question": "hi"}], ids=["empty", "no-known-field"])
def test_no_prompt_and_no_messages(loaded, model_input):
    # MLflow drops unknown columns before the model sees the input; what is left is no row at all
    with pytest.raises(MlflowException, match="prompt"):
        loaded.predict(model_input)
    with pytest.raises(MlflowException):  # MLflow's own "requires single input" check
        next(loaded.predict_stream(model_input))


@pytest.mark.parametrize(("params", "says"), BAD_PARAMS)
def test_bad_params(loaded, params, says):
    with pytest.raises(MlflowException, match=says):
        loaded.predict({"prompt": "Hi"}, params=params)
    with pytest.raises(MlflowException, match=says):
        next(loaded.predict_stream({"prompt": "Hi"}, params=params))


def test_the_python_model_raises_before_streaming_and_keeps_the_llmflow_error(loaded):
    model = LlmflowPyfuncModel.from_llm(find_llm(loaded))
    with pytest.raises(InvalidModelInput) as caught:
        model.predict_stream(None, {"messages": [{"role": "wizard", "content": "x"}]})
    assert isinstance(caught.value.error, InvalidMessages)
    assert caught.value.error.param == "input.messages[0].role"
    assert caught.value.get_http_status_code() == 400


@pytest.fixture(scope="module")
def small_context(logged):
    """The same logged model with a 256-token context: `model_config` overrides at load time."""
    with using(logged.store):
        model = mlflow.pyfunc.load_model(logged.model_uri, model_config={"engine_options": {"n_ctx": 256}})
    yield model
    find_llm(model).close()


def test_a_prompt_longer_than_the_context_window(small_context):
    prompt = "Tell me about the sea. " * 60
    with pytest.raises(MlflowException, match="context window is 256 tokens") as caught:
        small_context.predict({"prompt": prompt})
    assert isinstance(caught.value.error, ContextLengthExceeded)
    with pytest.raises(MlflowException, match="shorten the prompt"):
        next(small_context.predict_stream({"prompt": prompt}))
    assert small_context.predict({"prompt": "Hi"}, params={"max_tokens": 2})  # still fine afterwards


def test_a_bad_model_config_override_names_the_key(logged):
    with using(logged.store), pytest.raises(Exception, match=r"model_config\.engine_options\.n_ctx"):
        mlflow.pyfunc.load_model(logged.model_uri, model_config={"engine_options": {"n_ctx": "big"}})
