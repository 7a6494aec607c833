"""Which files a reference needs, from a repo's listing alone."""

from __future__ import annotations

import pytest

from llmflow.errors import HubNotFound
from llmflow.hub.select import RepoFile, quant_label, select_files

GGUFS = [
    RepoFile(p)
    for p in (
        "Model-Q4_K_M.gguf",
        "Model-q8_0.gguf",
        "Model-IQ4_XS.gguf",
        "BF16/Model-BF16-00001-of-00002.gguf",
        "BF16/Model-BF16-00002-of-00002.gguf",
        "mmproj-Model-F16.gguf",
        "mmproj-Model-Q8_0.gguf",
        "README.md",
    )
]


def paths(quant=None, filename=None, files=GGUFS):
    selection = select_files("ref", quant, filename, files)
    return [f.path for f in selection.files], selection.entry


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("model-q4_k_m.gguf", "Q4_K_M"),
        ("Qwen2.5-7B-Instruct-IQ4_XS-00001-of-00003.gguf", "IQ4_XS"),
        ("Q8_0/model-00001-of-00002.gguf", "Q8_0"),
        ("model.BF16.gguf", "BF16"),
        ("model.gguf", None),
    ],
)
def test_quantization_labels_come_from_file_names(name, label):
    assert quant_label(name) == label


def test_a_quantization_matches_case_insensitively_with_its_mmproj():
    assert paths("Q8_0") == (["Model-q8_0.gguf", "mmproj-Model-Q8_0.gguf"], "Model-q8_0.gguf")
    assert paths("q4_k_m")[1] == "Model-Q4_K_M.gguf"


def test_a_split_model_comes_whole_from_its_first_part():
    names, entry = paths("bf16")
    assert names == ["BF16/Model-BF16-00001-of-00002.gguf", "BF16/Model-BF16-00002-of-00002.gguf"]
    assert entry == names[0]
    assert paths(filename="BF16/Model-BF16-00002-of-00002.gguf")[1] == names[0]


def test_an_unknown_quantization_lists_those_there_are():
    with pytest.raises(HubNotFound) as error:
        paths("Q5_K_M")
    assert error.value.available == ["BF16", "IQ4_XS", "Q4_K_M", "Q8_0"]  # mmproj files are no models
    assert "Q5_K_M" in str(error.value) and "IQ4_XS" in str(error.value)


def test_without_a_quantization_q4_k_m_else_the_only_model_else_a_list():
    assert paths()[1] == "Model-Q4_K_M.gguf"
    assert paths(files=[RepoFile("a-Q8_0.gguf"), RepoFile("README.md")])[1] == "a-Q8_0.gguf"
    with pytest.raises(HubNotFound, match="add :QUANT") as error:
        paths(files=[RepoFile("a-Q8_0.gguf"), RepoFile("a-Q2_K.gguf")])
    assert error.value.available == ["Q2_K", "Q8_0"]


def test_a_safetensors_repo_is_a_model_directory():
    files = [
        RepoFile(p) for p in ("config.json", "model.safetensors", "tokenizer.json", "original/x.pth", "a.bin")
    ]
    assert paths(files=files) == (["config.json", "model.safetensors", "tokenizer.json"], None)


@pytest.mark.parametrize(
    ("quant", "filename", "files", "says"),
    [
        (None, "nope.gguf", GGUFS, "no file 'nope.gguf'"),
        (None, "README.md", GGUFS, "not a .gguf file"),
        (None, None, [RepoFile("README.md")], "no GGUF or safetensors"),
        (
            "Q4",
            None,
            [RepoFile("m-Q4-00001-of-00003.gguf"), RepoFile("m-Q4-00003-of-00003.gguf")],
            "lacks parts",
        ),
    ],
)
def test_missing_files_are_named(quant, filename, files, says):
    with pytest.raises(HubNotFound, match=says):
        select_files("ref", quant, filename, files)
