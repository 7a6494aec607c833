"""Fuzzing: schemathesis against the server's own OpenAPI document on a real server (positive and
negative cases for every route), and hypothesis on the params and messages validators.

Bounded for CI: `LLMFLOW_FUZZ_EXAMPLES` examples per operation (default 25) and the model's
`max_tokens` capped at 4. `LLMFLOW_FUZZ_EXAMPLES=500 pytest tests/reliability/test_fuzz.py` is
the long mode.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from llmflow.errors import InvalidRequest
from llmflow.params import SamplingParams
from llmflow.prompts import parse_messages
from llmflow.server.error_answers import ANTHROPIC_PATHS
from tests.server.conftest import running

EXAMPLES = int(os.environ.get("LLMFLOW_FUZZ_EXAMPLES", "25"))
MAX_TOKENS = 4
_FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzz_server(served_llm):
    with running(
        served_llm, model_name="m", max_queue=4, request_timeout_s=60, max_body_bytes=256 * 1024
    ) as server:
        yield server


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    config = SchemathesisConfig()
    config.projects.default.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES
    )
    return schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json", config=config)


def _cap_generation(body: Any) -> None:
    """Keep generations short: the fuzzer is testing the server, not the model's speed."""
    if not isinstance(body, dict):
        return
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS):
            body[name] = MAX_TOKENS
    params = body.get("params")
    if isinstance(params, dict):
        _cap_generation(params)


def _assert_openai_error(body: Any) -> None:
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]


def _assert_anthropic_error(body: Any) -> None:
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


_MLFLOW_SHAPED = ("/invocations", "/serving-endpoints/{name}/invocations")


def _operations(api_schema) -> list[Any]:
    return [result.ok() for result in api_schema.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_api_survives_fuzzing(api_schema, fuzz_server, mode):
    """Every route, `EXAMPLES` cases each: no 5xx, documented statuses and bodies, and every 4xx
    in OpenAI's error shape (Anthropic's on its routes)."""
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    operations = _operations(api_schema)
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions", "/invocations"}
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @_FUZZ
        def fuzz(case):
            _cap_generation(case.body)
            response = case.call(base_url=fuzz_server.url, timeout=120)
            case.validate_response(response, checks=checks)
            if response.status_code >= 400:
                body = response.json()
                # the model's refusal in MLflow's shape, or any error on Databricks' path (documented)
                if case.path in _MLFLOW_SHAPED and "error_code" in body:
                    assert isinstance(body["message"], str)
                elif case.path in ANTHROPIC_PATHS:  # Anthropic's clients read Anthropic's shape
                    _assert_anthropic_error(body)
                else:
                    _assert_openai_error(body)

        try:
            fuzz()
        except Unsatisfiable:  # a route with no input has no negative cases
            assert mode == GenerationMode.NEGATIVE


# -- validators ------------------------------------------------------------------------------------
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_param_names = st.sampled_from(
    ["temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_tokens", "stop", "seed", "other"]
)


@given(st.dictionaries(_param_names, _json, max_size=6) | _json)
@settings(max_examples=max(200, EXAMPLES * 8), deadline=None)
def test_params_validator_only_raises_invalid_request(raw):
    with contextlib.suppress(InvalidRequest):
        SamplingParams.parse(raw)


_message = st.dictionaries(st.sampled_from(["role", "content", "name", "x"]), _json, max_size=3)


@given(st.lists(_message | _json, max_size=4) | _json)
@settings(max_examples=max(200, EXAMPLES * 8), deadline=None)
def test_messages_validator_only_raises_invalid_request(raw):
    with contextlib.suppress(InvalidRequest):
        parse_messages(raw)
