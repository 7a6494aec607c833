"""The `hf://` grammar, and its place in the one parser of a model reference."""

from __future__ import annotations

import pytest

from llmflow.errors import InvalidParams
from llmflow.hub import HubRef
from llmflow.model_files import parse_model_ref


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("hf://org/repo", HubRef("org/repo")),
        ("hf://org/repo:Q4_K_M", HubRef("org/repo", quant="Q4_K_M")),
        ("hf://org/repo:q8_0@v1.0", HubRef("org/repo", quant="q8_0", revision="v1.0")),
        ("hf://org/repo/sub/model.gguf", HubRef("org/repo", filename="sub/model.gguf")),
        ("hf://org/repo@" + "a" * 40, HubRef("org/repo", revision="a" * 40)),
        (
            "hf://org/repo/model.gguf@refs/pr/1",
            HubRef("org/repo", filename="model.gguf", revision="refs/pr/1"),
        ),
    ],
)
def test_references_parse_and_print_back(text, parsed):
    assert HubRef.parse(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hf://repo", "needs ORG/REPO"),
        ("hf://org/repo:", "not a quantization"),
        ("hf://org/repo:Q4/x.gguf", "not both"),
        ("hf://org/repo@", "not a revision"),
        ("hf://org/../x", "not a repo id"),
        ("hf://org/repo/../x.gguf", "not a file path"),
        ("hf://org/repo//x.gguf", "not a file path"),
        ("hf://org/my repo", "not a repo id"),
    ],
)
def test_malformed_references_are_named_errors(text, says):
    with pytest.raises(InvalidParams) as error:
        HubRef.parse(text)
    assert error.value.param == "model"
    assert says in str(error.value) and "hf://ORG/REPO" in str(error.value)


def test_the_one_parser_tells_hub_models_from_paths_and_mlflow_uris(tmp_path):
    ref = parse_model_ref("hf://org/repo:Q4_K_M")
    assert ref.hub == HubRef("org/repo", quant="Q4_K_M") and not ref.logged
    assert ref.name == "hf://org/repo:Q4_K_M"  # what a server lists it as
    assert parse_model_ref("models:/chat/1").logged and parse_model_ref("models:/chat/1").hub is None
    assert parse_model_ref(str(tmp_path)).hub is None
    assert HubRef.parse("org/repo") is None


def test_a_serve_config_file_names_hub_models_by_their_reference_without_downloading(tmp_path):
    from llmflow.cli.serve import model_configs

    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n  - model: hf://org/repo:Q4_K_M\n  - name: chat\n    model: hf://org/other@v2\n"
    )
    configs = model_configs(
        [], path, None, {"engine": None, "engine_options": {}, "parallel": None, "threads": None}
    )
    assert [c.expected_name() for c in configs] == ["hf://org/repo:Q4_K_M", "chat"]
