"""The images benchmark's own parts that need no server: its images (new for each seed, the same
for a seed), its summary (the image's cost and what reuse saves, round by round) and its table."""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import render  # noqa: E402
from benchmarks.bench_images import messages, photo, summarize  # noqa: E402
from benchmarks.record import Recording  # noqa: E402


def test_an_image_is_a_png_data_uri_of_its_own_for_each_seed():
    from PIL import Image

    first = photo(1, size=64)
    assert first == photo(1, size=64) and first != photo(2, size=64)
    header, data = first.split(",", 1)
    assert header == "data:image/png;base64"
    assert Image.open(io.BytesIO(base64.b64decode(data))).size == (64, 64)
    parts = messages("a", first)[1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": first}}
    assert messages("a", None)[0] != messages("b", None)[0]  # a conversation of its own


def rounds(text: float, cold: float, same: float, prompt_ms: float | None) -> list[dict]:
    return [
        {"text_ttft_s": text * k, "cold_ttft_s": cold * k, "same_ttft_s": same * k,
         "text_prompt_ms": prompt_ms, "cold_prompt_ms": prompt_ms and prompt_ms * 10,
         "same_prompt_ms": prompt_ms and prompt_ms * 10}
        for k in (1.0, 2.0, 1.5)
    ]  # fmt: skip


def test_the_summary_gives_the_image_cost_and_the_reuse_round_by_round(tmp_path):
    ours = rounds(0.1, 2.1, 0.3, None)
    for r in ours:
        r["image_chunks"] = {"encoded": 3.0, "reused": 2.0}
    summary = summarize({"llmflow": ours, "llama-server": rounds(0.1, 2.1, 2.1, 50.0)})
    llmflow, peer = summary["servers"]["llmflow"], summary["servers"]["llama-server"]
    assert round(llmflow["image_cost_s"]["median"], 6) == 3.0
    assert round(llmflow["reuse_saves_s"]["median"], 6) == 2.7 and peer["reuse_saves_s"]["max"] == 0
    assert llmflow["image_chunks"] == {"encoded": 9.0, "reused": 6.0} and "cold_prompt_ms" not in llmflow
    assert peer["cold_prompt_ms"]["median"] == 500.0
    assert round(summary["llmflow_over_llama_server"]["same_ttft"]["median"], 6) == round(0.3 / 2.1, 6)
    config = {"model": "m.gguf", "mmproj": "mmproj-m.gguf", "shape": "smolvlm-256m", "image": "512x512 PNG",
              "threads": 2, "rounds": 3, "requests": 2}  # fmt: skip
    Recording.begin("images").write(tmp_path / "images.json", config=config, samples={}, summary=summary)
    text = render.render_text("<!-- BEGIN GENERATED: images -->\n<!-- END GENERATED: images -->\n", tmp_path)
    assert "| llama-server | 0.150 (0.100-0.200) | 3.150 (2.100-4.200) |" in text
    assert "6 of them from its encoded images" in text and "new image 500 ms" in text
