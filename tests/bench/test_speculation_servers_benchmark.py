"""The served-speculation benchmark's own parts that need no server: a request's decode rate, the
sides and what each is compared with, the summary round by round and its table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import render  # noqa: E402
from benchmarks.bench_speculation_servers import decode_rate, servers, sides, summarize  # noqa: E402
from benchmarks.record import Recording  # noqa: E402


def test_the_decode_rate_runs_from_the_first_content_to_the_last():
    answer = {"usage": {"completion_tokens": 11}, "ttft_s": 0.5, "last_s": 1.5}
    assert decode_rate(answer) == 10.0
    assert decode_rate({**answer, "usage": {"completion_tokens": 1}}) is None
    assert decode_rate({**answer, "usage": None}) is None


def test_llmflow_opts_out_per_request_and_llama_server_per_process(tmp_path):
    args = argparse.Namespace(n_ctx=2048, threads=2, draft_max=8, llama_server_args="-ngl 999",
                              llama_server=tmp_path / "llama-server", spec_type=["ngram-mod"])  # fmt: skip
    commands = {name: command(1234) for name, command in servers(args, tmp_path / "m.gguf").items()}
    assert list(commands) == ["llmflow", "llama-server off", "llama-server ngram-mod"]
    assert "speculative=true" in commands["llmflow"] and "--spec-type" not in commands["llama-server off"]
    assert commands["llama-server ngram-mod"][-2:] == ["--spec-type", "ngram-mod"]
    table = sides({name: f"http://{name}" for name in commands})
    assert table["llmflow off"] == ("http://llmflow", {"speculative": False}, "")
    assert table["llmflow on"][2] == "llmflow off"
    assert table["llama-server ngram-mod"][2] == "llama-server off" and table["llama-server off"][2] == ""


def test_the_summary_compares_each_side_with_its_own_server_off(tmp_path):
    table = sides({"llmflow": "a", "llama-server off": "b", "llama-server ngram-mod": "c"})
    rate = {"llmflow on": 300.0, "llmflow off": 100.0}
    rate.update({"llama-server off": 100.0, "llama-server ngram-mod": 200.0})

    def answers(name: str, k: float) -> list[dict]:
        text = "copied" if name != "llama-server ngram-mod" else "other"
        return [{"rate": rate[name] * k, "tokens": 9, "ttft_s": 0.1, "text": text} for _ in range(2)]

    rounds = [{name: answers(name, k) for name in table} for k in (1.0, 2.0, 1.5)]
    summary = summarize(rounds, table)
    assert summary["on_over_off"]["llmflow on"]["median"] == 3.0
    assert summary["on_over_off"]["llama-server ngram-mod"]["median"] == 2.0
    assert summary["identical_to_off"]["llmflow on"] == {"same": 6, "answers": 6}
    assert summary["identical_to_off"]["llama-server ngram-mod"]["same"] == 0
    assert summary["llmflow_on_over_llama_server"]["llama-server ngram-mod"]["median"] == 1.5
    config = {"model": "m.gguf", "max_tokens": 256, "draft_max": 8, "rounds": 3, "rewrites": [["a", "b"]]}
    Recording.begin("speculation_servers").write(
        tmp_path / "speculation_gpu.json", config=config, samples={}, summary=summary
    )
    text = render.render_text(
        "<!-- BEGIN GENERATED: gpu-speculation -->\n<!-- END GENERATED: gpu-speculation -->\n", tmp_path
    )
    assert "| `llmflow on` | 450.0 (300.0-600.0) | 3.00 | 6 of 6 |" in text
    assert "`llama-server ngram-mod` 1.50" in text
