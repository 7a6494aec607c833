"""Copying weights into a model directory: files, directories, with and without a progress bar."""

from __future__ import annotations

import pytest

from llmflow.mlflow.weights import copy_weights, total_size


@pytest.mark.parametrize("progress", [True, False])
def test_copy_a_file(tmp_path, progress, capsys):
    source = tmp_path / "model.gguf"
    source.write_bytes(bytes(range(256)) * 4099)  # not a multiple of any buffer size
    target = tmp_path / "out" / "model.gguf"
    target.parent.mkdir()
    copy_weights(source, target, progress=progress)
    assert target.read_bytes() == source.read_bytes()
    assert ("copying model.gguf" in capsys.readouterr().err) is progress


def test_copy_a_directory_keeps_its_layout(tmp_path):
    source = tmp_path / "hf-model"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "sub" / "weights.safetensors").write_bytes(b"\x00" * 1000)
    target = tmp_path / "artifacts" / "hf-model"
    copy_weights(source, target, progress=True)
    assert (target / "config.json").read_text() == "{}"
    assert (target / "sub" / "weights.safetensors").read_bytes() == b"\x00" * 1000
    assert total_size(target) == total_size(source) == 1002
