"""A fake Hub per test (its own cache, endpoint and environment), serving:

- `GGUF_REPO`: the embedded SmolLM2 GGUF; `v1` (tag) holds Q4_1 only, `main` adds Q8_0 (the same
  bytes) and a new README
- `SPLIT_REPO`: the same model split in three real GGUF parts
- `TINY_REPO`: a tiny random Llama in safetensors with its tokenizer (the transformers engine)
- `QUANTS_REPO`: small stand-in files named as quantized GGUFs (selection only, never loaded)
- `GATED_REPO`: gated, downloads need the token `TOKEN`
- `HUGE_REPO`: a file stated far larger than any disk
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hub.fake_hub import FakeHub, HubFile, HubRepo

GGUF_REPO = "llmflow-test/SmolLM2-135M-Instruct-GGUF"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPLIT_REPO = "llmflow-test/SmolLM2-135M-Instruct-split-GGUF"
TINY_REPO = "llmflow-test/tiny-llama"
QUANTS_REPO = "llmflow-test/quants-GGUF"
GATED_REPO = "llmflow-test/gated-GGUF"
HUGE_REPO = "llmflow-test/huge-GGUF"
TOKEN = "hf_test_token"
QUANT_FILES = (
    "Model-Q4_K_M.gguf",
    "Model-q8_0.gguf",
    "Model-F16-00001-of-00002.gguf",
    "Model-F16-00002-of-00002.gguf",
    "mmproj-Model-F16.gguf",
    "README.md",
)


@dataclass(frozen=True)
class Content:
    gguf: HubFile
    split: dict[str, HubFile]
    tiny: dict[str, HubFile]


@pytest.fixture(scope="session")
def content(tmp_path_factory: pytest.TempPathFactory) -> Content:
    from llmflow.model_files import default_model_path
    from tests.fakes.hf_models import write_tiny_model
    from tests.hub.split_gguf import split_gguf

    parts = split_gguf(default_model_path(), tmp_path_factory.mktemp("split"), "SmolLM2-135M-Instruct-Q4_1")
    tiny = write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")
    return Content(
        gguf=HubFile(default_model_path().read_bytes()),
        split={p.name: HubFile(p.read_bytes()) for p in parts},
        tiny={p.name: HubFile(p.read_bytes()) for p in sorted(tiny.iterdir()) if p.is_file()},
    )


def repos(content: Content) -> dict[str, HubRepo]:
    gguf = HubRepo()
    gguf.add_commit("v1", {GGUF_FILE: content.gguf, "README.md": HubFile(b"# v1\n")}, "v1")
    main = {
        GGUF_FILE: content.gguf,
        "SmolLM2-135M-Instruct.Q8_0.gguf": content.gguf,
        "README.md": HubFile(b"# v2\n"),
    }
    gguf.add_commit("v2", main, "main")
    split, tiny, quants, gated, huge = HubRepo(), HubRepo(), HubRepo(), HubRepo(token=TOKEN), HubRepo()
    split.add_commit("split", content.split, "main")
    tiny.add_commit("tiny", content.tiny, "main")
    quants.add_commit("quants", {name: HubFile(f"{name}\n".encode() * 512) for name in QUANT_FILES}, "main")
    gated.add_commit("gated", {"Model-Q4_K_M.gguf": HubFile(b"gated weights\n" * 64)}, "main")
    huge.add_commit("huge", {"Model-Q4_K_M.gguf": HubFile(b"", stated_size=10**18)}, "main")
    return {
        GGUF_REPO: gguf,
        SPLIT_REPO: split,
        TINY_REPO: tiny,
        QUANTS_REPO: quants,
        GATED_REPO: gated,
        HUGE_REPO: huge,
    }


@pytest.fixture
def hub(content: Content, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The fake Hub, running; this process (and its children) download from it into a cache of
    this test's own, online, without a token."""
    with FakeHub(repos(content)) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def cache_dir() -> Path:
    import os

    return Path(os.environ["HF_HUB_CACHE"])
