"""Downloading from a Hub-shaped local server through huggingface_hub's real download code (no
part of it patched): the cache, progress, resume, checksums, revisions, offline, each error."""

from __future__ import annotations

import logging

import pytest

from llmflow.errors import DiskFull, DownloadFailed, HubAccessDenied, HubNotFound, HubUnavailable
from llmflow.hub import HubRef, fetch
from llmflow.hub.fetch import forget
from llmflow.hub.verify import sha256_of
from tests.hub.conftest import (
    GATED_REPO,
    GGUF_FILE,
    GGUF_REPO,
    HUGE_REPO,
    QUANTS_REPO,
    SPLIT_REPO,
    TOKEN,
    cache_dir,
)


def get(text: str):
    return fetch(HubRef.parse(text), show_bar=False)


def test_a_pull_fills_the_standard_cache_with_progress_lines_and_checksums(hub, content, caplog):
    with caplog.at_level(logging.INFO, logger="llmflow.hub"):
        model = get(f"hf://{GGUF_REPO}:Q4_1")
    repo = hub.repos[GGUF_REPO]
    assert model.commit == repo.refs["main"]
    assert (
        model.path
        == cache_dir()
        / "models--llmflow-test--SmolLM2-135M-Instruct-GGUF"
        / "snapshots"
        / (model.commit)
        / GGUF_FILE
    )
    assert model.path.is_symlink() and model.path.resolve().name == content.gguf.sha256
    assert [(f.path, f.size, f.sha256) for f in model.files] == [
        (GGUF_FILE, content.gguf.size, content.gguf.sha256)
    ]
    lines = [r.getMessage() for r in caplog.records]
    shares = [int(line.rsplit("(", 1)[1].rstrip("%)")) for line in lines if line.endswith("%)")]
    assert len(shares) >= 5 and shares == sorted(shares) and shares[-1] < 100  # as it goes, by tenths
    assert lines[-1].startswith(f"downloaded {GGUF_FILE}: 98.4 MB")
    before = len(hub.seen)
    assert get(f"hf://{GGUF_REPO}:Q4_1").path == model.path  # once listed, a reference is not asked again
    assert len(hub.seen) == before
    assert get(f"hf://{GGUF_REPO}:q4_1").path == model.path  # another is listed, and found in the cache
    assert [s.path.split("/")[1] for s in hub.seen[before:]] == ["api"]


def test_a_cut_connection_resumes_where_it_stopped(hub, content):
    hub.cut(GGUF_FILE, at=30_000_000)
    model = get(f"hf://{GGUF_REPO}/{GGUF_FILE}")
    first, second = hub.gets(GGUF_FILE)
    assert first.range is None and second.range is not None
    resumed_at = int(second.range.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 30_000_000  # what was written before the cut is kept
    assert sha256_of(model.path) == content.gguf.sha256


def test_a_checksum_mismatch_is_refused_and_the_file_never_used(hub, monkeypatch):
    hub.corrupt("Model-Q4_K_M.gguf")
    with pytest.raises(DownloadFailed, match="checksum") as error:
        get(f"hf://{QUANTS_REPO}:Q4_K_M")
    assert error.value.path == "Model-Q4_K_M.gguf"
    assert not list(cache_dir().rglob("Model-Q4_K_M.gguf"))
    assert not [p for p in (cache_dir() / "models--llmflow-test--quants-GGUF" / "blobs").iterdir()]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailable):
        get(f"hf://{QUANTS_REPO}:Q4_K_M")


def test_quantizations_match_case_insensitively_and_a_miss_lists_them(hub):
    assert get(f"hf://{QUANTS_REPO}:Q8_0").path.name == "Model-q8_0.gguf"
    with pytest.raises(HubNotFound) as error:
        get(f"hf://{QUANTS_REPO}:Q5_K_M")
    assert error.value.available == ["F16", "Q4_K_M", "Q8_0"]


def test_a_split_model_and_its_mmproj_come_whole(hub):
    model = get(f"hf://{QUANTS_REPO}:f16")
    assert [f.path for f in model.files] == [
        "Model-F16-00001-of-00002.gguf",
        "Model-F16-00002-of-00002.gguf",
        "mmproj-Model-F16.gguf",
    ]
    assert model.path.name == "Model-F16-00001-of-00002.gguf"
    assert [p.name for p in model.companions] == ["Model-F16-00002-of-00002.gguf", "mmproj-Model-F16.gguf"]


def test_real_split_parts_download_whole(hub, content):
    model = get(f"hf://{SPLIT_REPO}")
    assert [f.path for f in model.files] == sorted(content.split)
    assert model.path.name.endswith("-00001-of-00003.gguf")
    assert all(f.local.stat().st_size == content.split[f.path].size for f in model.files)


def test_a_revision_pins_the_commit(hub):
    repo = hub.repos[GGUF_REPO]
    v1 = get(f"hf://{GGUF_REPO}@v1")  # one GGUF model in v1: no quantization needed
    assert v1.commit == repo.refs["v1"] != repo.refs["main"]
    assert get(f"hf://{GGUF_REPO}:Q4_1@{repo.refs['v1']}").commit == repo.refs["v1"]
    with pytest.raises(HubNotFound) as error:
        get(f"hf://{GGUF_REPO}:Q8_0@v1")
    assert error.value.available == ["Q4_1"]
    with pytest.raises(HubNotFound, match="add :QUANT"):  # main holds Q4_1 and Q8_0
        get(f"hf://{GGUF_REPO}")
    with pytest.raises(HubNotFound, match="no revision 'v9'"):
        get(f"hf://{GGUF_REPO}@v9")


def test_offline_the_cache_alone_answers(hub, monkeypatch):
    online = get(f"hf://{QUANTS_REPO}:Q8_0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub.seen)
    forget()  # as a new process would
    offline = get(f"hf://{QUANTS_REPO}:q8_0")
    assert offline.path == online.path and offline.commit == online.commit
    assert [f.sha256 for f in offline.files] == [f.sha256 for f in online.files]
    assert len(hub.seen) == before
    with pytest.raises(HubUnavailable, match="HF_HUB_OFFLINE=1") as error:
        get(f"hf://{QUANTS_REPO}:Q4_K_M")  # this revision is cached, not this file
    assert "has Q8_0" in str(error.value)
    with pytest.raises(HubUnavailable, match="not in the local Hugging Face cache and HF_HUB_OFFLINE=1"):
        get(f"hf://{GGUF_REPO}:Q4_1")
    assert len(hub.seen) == before


def test_an_unknown_repo_is_named(hub):
    with pytest.raises(HubNotFound, match="no repo llmflow-test/nope on the Hub"):
        get("hf://llmflow-test/nope")


def test_a_gated_repo_needs_a_token_with_access(hub, monkeypatch):
    with pytest.raises(HubAccessDenied, match="set HF_TOKEN") as error:
        get(f"hf://{GATED_REPO}")
    assert not error.value.token_given
    monkeypatch.setenv("HF_TOKEN", "hf_someone_else")
    with pytest.raises(HubAccessDenied, match="has no access"):
        get(f"hf://{GATED_REPO}")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert get(f"hf://{GATED_REPO}").path.name == "Model-Q4_K_M.gguf"
    assert hub.gets("Model-Q4_K_M.gguf")[-1].authorization == f"Bearer {TOKEN}"


def test_what_cannot_fit_on_the_disk_is_refused_before_downloading(hub):
    with pytest.raises(DiskFull, match="not enough disk space") as error:
        get(f"hf://{HUGE_REPO}")
    assert error.value.needed == 10**18 and error.value.free < error.value.needed
    assert not hub.gets("Model-Q4_K_M.gguf")


def test_an_unreachable_hub_is_named_and_the_cache_still_serves(hub, monkeypatch):
    cached = get(f"hf://{QUANTS_REPO}:Q8_0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert get(f"hf://{QUANTS_REPO}:Q8_0").path == cached.path
    with pytest.raises(HubUnavailable, match="cannot be reached"):
        get(f"hf://{GGUF_REPO}:Q4_1")


def test_a_full_disk_during_a_download_is_named(hub):
    import errno

    from llmflow.hub.failures import hub_errors
    from llmflow.hub.settings import HubSettings

    ref = HubRef.parse(f"hf://{GGUF_REPO}:Q4_1")
    with (
        pytest.raises(DiskFull, match="the disk filled up during the download"),
        hub_errors(ref, HubSettings.from_env(), GGUF_FILE),
    ):
        raise OSError(errno.ENOSPC, "No space left on device")  # as a write into the cache fails
