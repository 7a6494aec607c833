"""`llmflow pull`, `llmflow models`, `llmflow models rm`, through the command line's runner."""

from __future__ import annotations

from typer.testing import CliRunner

from llmflow.cli import app
from tests.hub.conftest import GGUF_REPO, QUANTS_REPO, cache_dir


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_pull_downloads_says_so_and_prints_the_path(hub):
    result = run("pull", f"hf://{QUANTS_REPO}:Q8_0")
    assert result.exit_code == 0, result.output
    path = result.stdout.strip()
    assert path.startswith(str(cache_dir())) and path.endswith("Model-q8_0.gguf")
    assert f"fetching hf://{QUANTS_REPO}:Q8_0" in result.stderr
    assert "2 file(s)" in result.stderr  # the model and its mmproj
    assert "downloaded Model-q8_0.gguf" in result.stderr  # progress lines: stderr is no terminal here


def test_models_lists_the_cache_and_rm_removes(hub):
    assert run("pull", f"hf://{QUANTS_REPO}:Q8_0").exit_code == 0
    assert run("pull", f"hf://{QUANTS_REPO}:F16").exit_code == 0
    assert run("pull", f"hf://{GGUF_REPO}:Q4_1@v1").exit_code == 0
    listed = run("models")
    assert listed.exit_code == 0
    assert f"hf://{GGUF_REPO}\t98.4 MB" in listed.stdout
    assert f"hf://{QUANTS_REPO}" in listed.stdout and "(main)" in listed.stdout and "(v1)" in listed.stdout

    removed = run("models", "rm", f"hf://{QUANTS_REPO}:f16")
    assert removed.exit_code == 0 and "removed" in removed.stderr
    left = sorted(p.name for p in cache_dir().rglob("*.gguf") if "quants" in str(p))
    assert left == ["Model-q8_0.gguf"]  # what :f16 downloads went: its parts and the mmproj file

    assert run("models", "rm", f"hf://{GGUF_REPO}").exit_code == 0
    assert f"hf://{GGUF_REPO}" not in run("models").stdout


def test_bad_references_are_clear_errors(hub):
    for args, says in [
        (("pull", "org/repo"), "not a Hub model"),
        (("pull", "hf://org"), "needs ORG/REPO"),
        (("pull", "hf://llmflow-test/nope"), "no repo llmflow-test/nope"),
        (("pull", f"hf://{QUANTS_REPO}:Q3_K"), "available: F16, Q4_K_M, Q8_0"),
        (("models", "rm", "hf://llmflow-test/nope"), "not in the local Hugging Face cache"),
    ]:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.stderr, (args, result.stderr)
