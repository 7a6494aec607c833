"""`llmflow log` argument handling (the full log -> chat round trip is in test_chat_command)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from llmflow.cli import app
from llmflow.cli.common import parse_assignments


def test_key_value_options_decode_json_values():
    parsed = parse_assignments(["max_tokens=5", "stop=<|im_end|>", "seed=null", "t=0.5", "a=x=y"], "--param")
    assert parsed == {"max_tokens": 5, "stop": "<|im_end|>", "seed": None, "t": 0.5, "a": "x=y"}
    assert parse_assignments(['stop=["a", "b"]'], "--param") == {"stop": ["a", "b"]}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--param", "max_tokens"], "KEY=VALUE"),
        (["--param", "max_tokens=0"], "max_tokens"),
        (["--engine", "warp_drive"], "unknown engine"),
        (["no/such/model.gguf"], "no model file"),
    ],
)
def test_bad_arguments_fail_before_logging(tmp_path, args, says):
    result = CliRunner().invoke(app, ["log", "--tracking-uri", f"sqlite:///{tmp_path / 'never.db'}", *args])
    assert result.exit_code == 2
    assert says in result.stderr
    assert not (tmp_path / "never.db").exists()


@pytest.fixture
def tracking_uri_kept():
    """The process's tracking URI after the test as it was before it."""
    import mlflow

    before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    yield
    mlflow.set_tracking_uri(before)


@pytest.mark.parametrize("set_before", [True, False])
@pytest.mark.usefixtures("tracking_uri_kept")
def test_the_tracking_store_of_one_command_is_not_left_behind(tmp_path, monkeypatch, set_before):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = f"sqlite:///{tmp_path / 'before.db'}" if set_before else None
    mlflow.set_tracking_uri(before)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(app, ["log", "--by-reference", "--tracking-uri", store])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "store.db").exists()  # the command logged there
    assert mlflow.is_tracking_uri_set() is set_before
    assert os.environ.get("MLFLOW_TRACKING_URI") == before
    if set_before:
        assert mlflow.get_tracking_uri() == before
