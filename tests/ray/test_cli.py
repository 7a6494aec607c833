"""`llmflow serve --ray`: the command starts a local Ray cluster, serves through Ray's proxy,
and stops everything on Ctrl-C or SIGTERM; bad scaling options are refused before anything starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from openai import OpenAI
from typer.testing import CliRunner

from llmflow.cli import app as cli
from llmflow.server.model_config import ModelConfig
from tests.ray.conftest import free_port
from tests.server.conftest import TIMEOUT_S, wait_healthy


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--replicas", "2"], "needs --ray"),
        (["--autoscale", "1:2"], "needs --ray"),
        (["--ray-address", "auto"], "needs --ray"),
        (["--ray", "--autoscale", "3:1"], "MIN:MAX"),
        (["--ray", "--autoscale", "two"], "MIN:MAX"),
        (["--ray", "--replicas", "2", "--autoscale", "1:2"], "not both"),
        (["--ray", "--replicas", "0"], "--replicas"),
    ],
)
def test_bad_ray_options_are_refused_before_anything_starts(options, says):
    result = CliRunner().invoke(cli, ["serve", *options])
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_llmflow_serve_on_ray_streams_and_stops_on_a_signal(stop):
    port = free_port()
    command = [sys.executable, "-m", "llmflow", "serve", "--ray", "--replicas", "1", "--threads", "1"]
    command += ["--port", str(port), "--api-key", "secret"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url)
        client = OpenAI(base_url=f"{url}/v1", api_key="secret", max_retries=0, timeout=TIMEOUT_S)
        stream = client.completions.create(
            model=ModelConfig().expected_name(), prompt="1, 2, 3,", max_tokens=8, stream=True
        )
        assert len([chunk for chunk in stream if chunk.choices]) >= 2
        wrong_key = OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0, timeout=TIMEOUT_S)
        with pytest.raises(Exception, match="401"):
            wrong_key.models.list()  # the replicas' own key check, through the proxy

        process.send_signal(stop)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, output
        assert "stopping" in output
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def documented_serve_config() -> dict:
    """The `serve run` / `serve deploy` config file the Ray page of the documentation shows."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "ray.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# serve_config\.yaml.*?)```", text, re.DOTALL)
    assert block, "the documentation's serve_config.yaml example"
    return yaml.safe_load(block.group(1))


def test_the_documented_serve_config_is_a_valid_ray_serve_config():
    from ray.serve.schema import ServeDeploySchema

    from llmflow.ray.app import RayAppArgs

    config = ServeDeploySchema.parse_obj(documented_serve_config())
    (app,) = config.applications
    assert app.import_path == "llmflow.ray:build"
    RayAppArgs.model_validate(app.args)


@pytest.fixture
def sigint_reaches_children():
    """A child inherits an ignored SIGINT from a run started as a shell's background job, and a
    Python child then never sees Ctrl-C; at a terminal it always does. A handled signal is reset
    to its default in a child, so handle it here while the child starts."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_serve_run_with_the_documented_config_serves_and_stops(tmp_path, sigint_reaches_children):
    config = documented_serve_config()
    port = free_port()
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    args = config["applications"][0]["args"]
    del args["model"]  # the embedded model, on one replica of one thread
    args.update(threads=1, min_replicas=1, max_replicas=1)
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    serve = Path(sys.executable).with_name("serve")
    process = subprocess.Popen(  # Ray's own CLI: Ctrl-C works if SIGINT reaches it (see fixture)
        [str(serve), "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url)
        client = OpenAI(
            base_url=f"{url}/v1", api_key=args["server"]["api_key"], max_retries=0, timeout=TIMEOUT_S
        )
        answer = client.completions.create(
            model=ModelConfig().expected_name(), prompt="1, 2, 3,", max_tokens=4
        )
        assert answer.usage.completion_tokens >= 1
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, output[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
