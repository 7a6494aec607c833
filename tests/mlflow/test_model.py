"""The logged model, loaded back through MLflow: the seed's streaming loop, batch predict, params."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException

import llmflow.mlflow
from llmflow.llm import LLM
from llmflow.mlflow import LlmflowPyfuncModel, find_llm
from tests.mlflow.conftest import DEFAULT_MAX_TOKENS
from tests.text_spans import token_span

FINISH_REASONS = {"stop", "length", "cancelled"}


def check_stream(chunks: list[dict]) -> tuple[str, dict]:
    """Text chunks are non-empty `{"content"}` dicts; exactly one last chunk carries the finish."""
    assert chunks, "the stream was empty"
    *texts, final = chunks
    for chunk in texts:
        assert set(chunk) == {"content"}
        assert isinstance(chunk["content"], str) and chunk["content"] != ""
    assert final["content"] == ""
    assert final["finish_reason"] in FINISH_REASONS
    usage = final["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0
    return "".join(c["content"] for c in texts), final


def test_the_seed_loop_works_verbatim(loaded, capsys):
    for c in loaded.predict_stream(
        {"prompt": "大阪の観光名所をひとつ教えて。"},
        params={
            "max_tokens": 50,
            "stop": "<|im_end|>",
            "system_prompt": "あなたは日本語を話すAIアシスタントです。日本語で必ず回答してください。",
        },
    ):
        print(c["content"], end="|")
    printed = capsys.readouterr().out
    pieces = printed.split("|")
    assert pieces[-1] == ""  # every chunk ends with the separator
    *texts, final = pieces[:-1]
    assert final == ""  # the one final chunk has no text
    assert texts and all(texts), "text chunks are never empty"
    assert "\ufffd" not in "".join(texts[:-1])  # multi-byte characters are never split


def test_a_stream_ends_with_one_final_chunk_carrying_usage(loaded):
    _, final = check_stream(list(loaded.predict_stream({"prompt": "Say hello."}, params={"max_tokens": 8})))
    assert final["usage"]["completion_tokens"] <= 8
    if final["finish_reason"] == "length":
        assert final["usage"]["completion_tokens"] == 8


def test_chat_messages_stream_too(loaded):
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "What colour is the sky?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And grass?"},
    ]
    _, final = check_stream(list(loaded.predict_stream({"messages": messages}, params={"max_tokens": 6})))
    assert final["usage"]["prompt_tokens"] > 20  # the whole conversation was in the prompt


def test_breaking_out_of_a_stream_frees_the_model(loaded):
    stream = loaded.predict_stream({"prompt": "Count to fifty."}, params={"max_tokens": 64})
    first = next(stream)
    assert first["content"]
    stream.close()  # what `break` does once the generator is collected
    _, final = check_stream(list(loaded.predict_stream({"prompt": "Hi"}, params={"max_tokens": 4})))
    assert final["usage"]["completion_tokens"] <= 4


def test_the_logged_default_params_apply(loaded):
    _, final = check_stream(list(loaded.predict_stream({"prompt": "Tell me a long story."})))
    assert final["usage"]["completion_tokens"] <= DEFAULT_MAX_TOKENS


def test_predict_answers_every_row(loaded):
    answers = loaded.predict(
        [{"prompt": "Name a fruit."}, {"prompt": "Name a colour."}, {"prompt": "Name a planet."}],
        params={"max_tokens": 6},
    )
    assert isinstance(answers, list) and len(answers) == 3
    assert all(isinstance(a, str) and a for a in answers)


def test_predict_takes_a_dataframe_of_prompts_or_of_messages(loaded):
    prompts = pd.DataFrame({"prompt": ["One.", "Two.", "Three."]})
    assert len(loaded.predict(prompts, params={"max_tokens": 3})) == 3
    conversations = pd.DataFrame({"messages": [[{"role": "user", "content": f"Say {w}."}] for w in "abc"]})
    assert len(loaded.predict(conversations, params={"max_tokens": 3})) == 3


def test_predict_with_details_gives_finish_reason_and_usage(loaded):
    rows = loaded.predict({"prompt": "Hello"}, params={"max_tokens": 5, "details": True})
    assert len(rows) == 1
    row = rows[0]
    assert set(row) == {"content", "finish_reason", "usage"}
    assert row["finish_reason"] in FINISH_REASONS
    assert row["usage"]["completion_tokens"] <= 5


def test_greedy_decoding_is_repeatable_and_the_stream_matches_predict(loaded):
    params = {"max_tokens": 8, "temperature": 0.0}
    prompt = {"prompt": "The capital of France is"}
    [first] = loaded.predict(prompt, params=params)
    [second] = loaded.predict(prompt, params=params)
    streamed, _ = check_stream(list(loaded.predict_stream(prompt, params=params)))
    assert first == second == streamed


def test_stop_sequences_cut_the_answer(loaded, embedded_llm):
    params = {"max_tokens": 24, "temperature": 0.0}
    prompt = {"prompt": "List three animals, separated by commas."}
    [full] = loaded.predict(prompt, params=params)
    # two tokens from the middle of this machine's greedy answer
    engine = embedded_llm.engine
    stop = token_span(engine, full, start=len(engine.tokenize(full)) // 2, count=2)
    [cut] = loaded.predict(prompt, params={**params, "stop_sequences": [stop, "never-appears-xyz"]})
    assert cut == full[: full.index(stop)]
    assert stop not in cut


def test_mlflow_itself_checks_param_types(loaded):
    with pytest.raises(MlflowException, match="temperature"):
        loaded.predict({"prompt": "Hi"}, params={"temperature": "hot"})
    with pytest.raises(MlflowException, match="stop"):  # a list goes in stop_sequences
        loaded.predict({"prompt": "Hi"}, params={"stop": ["a", "b"]})


def test_find_llm_unwraps_llmflow_models_only(loaded, tmp_path):
    assert isinstance(find_llm(loaded), LLM)
    assert find_llm(object()) is None
    code = tmp_path / "echo.py"
    code.write_text(
        "import mlflow\n"
        "class Echo(mlflow.pyfunc.PythonModel):\n"
        "    def predict(self, context, model_input: list[str], params=None):\n"
        "        return model_input\n"
        "mlflow.models.set_model(Echo())\n"
    )
    mlflow.pyfunc.save_model(str(tmp_path / "echo"), python_model=str(code))
    assert find_llm(mlflow.pyfunc.load_model(str(tmp_path / "echo"))) is None


def test_from_llm_serves_an_llm_without_mlflow_loading(loaded):
    model = LlmflowPyfuncModel.from_llm(find_llm(loaded))
    assert model.predict(None, "Hi", {"max_tokens": 3, "stop": ["x", "y"]})[0]
    chunks = model.predict_stream(None, {"prompt": "Hi"}, {"max_tokens": 3})
    check_stream(list(chunks))
    with pytest.raises(llmflow.mlflow.InvalidModelInput, match="bogus"):
        model.predict_stream(None, {"prompt": "Hi"}, {"bogus": 1})  # raises before any iteration


def test_a_model_without_an_llm_says_how_to_get_one():
    with pytest.raises(MlflowException, match="from_llm"):
        LlmflowPyfuncModel().predict(None, "Hi")
