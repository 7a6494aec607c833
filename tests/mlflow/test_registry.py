"""Loading a logged model by every kind of URI, and in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import mlflow
import pytest

from llmflow.mlflow import find_llm
from tests.mlflow.conftest import ALIAS, REGISTERED_NAME


def uris(logged) -> dict[str, str]:
    return {
        "run": f"runs:/{logged.run_id}/model",
        "logged model": logged.model_uri,
        "version": f"models:/{REGISTERED_NAME}/{logged.version}",
        "alias": f"models:/{REGISTERED_NAME}@{ALIAS}",
    }


@pytest.mark.parametrize("kind", ["run", "logged model", "version", "alias"])
def test_load_by_uri_and_stream(logged, tracking, kind):
    model = mlflow.pyfunc.load_model(uris(logged)[kind])
    try:
        chunks = list(model.predict_stream({"prompt": "Hi"}, params={"max_tokens": 3}))
        assert chunks[-1]["finish_reason"] in {"stop", "length"}
        assert model.metadata.flavors["python_function"]["streamable"] is True
    finally:
        find_llm(model).close()


def test_the_registry_knows_the_version_and_alias(logged, tracking):
    client = mlflow.MlflowClient()
    version = client.get_model_version_by_alias(REGISTERED_NAME, ALIAS)
    assert str(version.version) == logged.version
    assert version.status == "READY"


SEED_LOOP = textwrap.dedent(
    """
    import json, sys
    import mlflow

    loaded_model = mlflow.pyfunc.load_model(sys.argv[1])
    chunks = []
    for c in loaded_model.predict_stream(
        {"prompt": "Tell me one sight in Osaka."},
        params={"max_tokens": 8, "stop": "<|im_end|>", "system_prompt": "You are brief."},
    ):
        print(c["content"], end="|", file=sys.stderr)
        chunks.append(c)
    print(json.dumps(chunks))
    """
)


def test_load_and_stream_in_a_fresh_process(logged, tracking):
    """A new interpreter: nothing of this process (classes, engine objects) is reused."""
    uri = f"models:/{REGISTERED_NAME}@{ALIAS}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": logged.store.uri}
    done = subprocess.run(
        [sys.executable, "-c", SEED_LOOP, uri], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    chunks = json.loads(done.stdout.strip().splitlines()[-1])
    *texts, final = chunks
    assert texts and all(c["content"] for c in texts)
    assert final["content"] == "" and final["usage"]["completion_tokens"] <= 8
