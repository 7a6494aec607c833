"""`mlflow.genai.evaluate` over an llmflow model, in process and through `llmflow serve`, with
code-based scorers; every prediction's trace is linked to the evaluation run."""

from __future__ import annotations

import mlflow
import pytest
from mlflow.genai.scorers import scorer
from openai import OpenAI

import llmflow.mlflow
from llmflow.server import ServedModel
from tests.mlflow.store import using
from tests.server.conftest import TIMEOUT_S, running

DATA = [
    {"inputs": {"question": "What is MLflow?"}, "expectations": {"max_words": 40}},
    {"inputs": {"question": "Say hi."}, "expectations": {"max_words": 40}},
]


@scorer
def answered(outputs) -> bool:
    return isinstance(outputs, str) and bool(outputs.strip())


@scorer
def within_length(outputs, expectations) -> bool:
    return len(outputs.split()) <= expectations["max_words"]


@pytest.fixture
def experiment(mlflow_store):
    # as mlflow.set_experiment would, without leaving it chosen for the tests that follow
    with using(mlflow_store), pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_EXPERIMENT_ID", mlflow_store.experiment_id)
        yield mlflow_store


def _check(result, store) -> None:
    assert result.metrics["answered/mean"] == 1.0
    assert result.metrics["within_length/mean"] == 1.0
    traces = mlflow.search_traces(locations=[store.experiment_id], run_id=result.run_id, return_type="list")
    assert len(traces) == len(DATA)
    assert all(t.info.request_metadata.get("mlflow.sourceRun") == result.run_id for t in traces)


def test_evaluate_an_llmflow_model_in_process(loaded, experiment):
    def predict_fn(question: str) -> str:
        return loaded.predict({"prompt": question}, params={"max_tokens": 8, "temperature": 0})[0]

    result = mlflow.genai.evaluate(data=DATA, predict_fn=predict_fn, scorers=[answered, within_length])
    _check(result, experiment)


def test_evaluate_an_llmflow_model_through_llmflow_serve(loaded, experiment):
    with running(ServedModel.from_pyfunc(loaded, "smollm2"), tracing=False) as server:
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S)

        def predict_fn(question: str) -> str:
            answer = client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=8
            )
            return answer.choices[0].message.content

        result = mlflow.genai.evaluate(data=DATA, predict_fn=predict_fn, scorers=[answered, within_length])
    _check(result, experiment)


def test_two_registered_versions_side_by_side(experiment):
    """The README's recipe: each version evaluated in its own run, their metrics compared."""
    for system_prompt in ("Answer in one word.", "Answer in one sentence."):
        with mlflow.start_run():
            llmflow.mlflow.log_model(
                "model", registered_model_name="compared", by_reference=True, system_prompt=system_prompt
            )
    results = {}
    for version in ("1", "2"):
        model = mlflow.pyfunc.load_model(f"models:/compared/{version}")

        def predict_fn(question: str, model=model) -> str:
            return model.predict({"prompt": question}, params={"max_tokens": 8, "temperature": 0})[0]

        with mlflow.start_run(run_name=f"compared v{version}") as run:
            results[version] = mlflow.genai.evaluate(data=DATA, predict_fn=predict_fn, scorers=[answered])
        assert results[version].run_id == run.info.run_id
        llmflow.mlflow.find_llm(model).close()
    runs = mlflow.search_runs(
        filter_string="attributes.run_name LIKE 'compared v%'", order_by=["attributes.run_name"]
    )
    assert list(runs["metrics.answered/mean"]) == [1.0, 1.0]
