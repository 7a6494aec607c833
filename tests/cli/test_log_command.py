"""`llmflow log` argument handling (the full log -> chat round trip is in test_chat_command)."""

from __future__ import annotations

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
