"""`llmflow chat`, driven through standard input of a real process."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from typer.testing import CliRunner

from llmflow.cli import app
from llmflow.model_files import default_model_path
from tests.cli.interactive import Interactive
from tests.mlflow.store import Store, using

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def chat_command(model: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "llmflow", "chat", model, *options]


def turns(stderr: str) -> list[str]:
    """The summary line after each answer: '[... · finish: X · N messages]'."""
    return re.findall(r"finish: (\w+) · (\d+) messages\]", stderr)


def test_a_multi_turn_chat_over_stdin():
    done = subprocess.run(
        chat_command(str(default_model_path()), "--max-tokens", "6", "--show-tokens"),
        input="Hello!\nAnd again?\n/reset\nHi\n",
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("you> ") == 5  # four lines read, then end of input at the prompt
    assert "|" in done.stdout  # --show-tokens separates chunks like the seed
    assert "(new conversation)" in done.stderr
    assert [n for _, n in turns(done.stderr)] == ["2", "4", "2"]  # the conversation is kept until /reset


def test_ctrl_c_stops_the_answer_and_keeps_the_conversation():
    chat = Interactive(chat_command(str(default_model_path()), "--max-tokens", "400", "--show-tokens"), ENV)
    try:
        chat.send("Write a very long story about a dragon who learns to cook.")
        chat.wait_for("out", lambda out: "you> " in out and "|" in out.split("you> ", 1)[1])
        chat.interrupt()
        chat.wait_for("err", lambda err: turns(err) == [("stopped", "2")])
        chat.send("Go on, tell me more about the kitchen.")
        chat.wait_for("out", lambda out: out.count("you> ") >= 2 and "|" in out.rsplit("you> ", 1)[1])
        chat.interrupt()
        chat.wait_for("err", lambda err: turns(err) == [("stopped", "2"), ("stopped", "4")])
        chat.wait_for("out", lambda out: out.count("you> ") >= 3)
        chat.interrupt()  # at the prompt: quit
        assert chat.finish() == 0
    finally:
        chat.finish(timeout=1)


def test_chat_with_a_model_logged_by_llmflow_log(tmp_path):
    store = Store.create(tmp_path / "store", experiment="cli")
    env = {**ENV, "MLFLOW_TRACKING_URI": store.uri}
    logged = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmflow",
            "log",
            "--experiment",
            "cli",
            "--registered-model-name",
            "cli-smol",
            "--param",
            "max_tokens=5",
            "--system-prompt",
            "Be brief.",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert logged.returncode == 0, logged.stderr[-2000:]
    uri = logged.stdout.strip().splitlines()[-1]
    assert uri == "models:/cli-smol/1"
    assert not (tmp_path / "mlruns").exists()  # artifacts went to the experiment's location
    chatted = subprocess.run(
        chat_command(uri), input="Hi\n", capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert chatted.returncode == 0, chatted.stderr[-2000:]
    assert turns(chatted.stderr) == [("length", "2")] or turns(chatted.stderr) == [("stop", "2")]


def test_chat_with_a_missing_model_fails_cleanly(tmp_path):
    store = Store.create(tmp_path, experiment="none")
    with using(store):
        result = CliRunner().invoke(app, ["chat", "models:/no-such-model/1", "--tracking-uri", store.uri])
    assert result.exit_code == 2
    assert "error:" in result.stderr
    assert "no-such-model" in result.stderr


def test_help():
    runner = CliRunner()
    for command in ("log", "chat"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0
        assert "Usage" in result.stdout
