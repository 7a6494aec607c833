"""The benchmark result format and the renderer that turns stored results into the documents'
numbers: provenance on every table, smoke runs marked, the committed documents up to date, the
results in git small (summaries; raw samples stay out), and no private names of llmflow imported."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import render  # noqa: E402
from benchmarks.record import SCHEMA, Recording, paired_ratios, spread  # noqa: E402
from benchmarks.suite import BY_NAME, RESULTS  # noqa: E402


def test_spread_keeps_every_measured_value_and_drops_missing_ones():
    assert spread([3.0, 1.0, None, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([None]) is None


def test_ratios_are_taken_round_by_round():
    # the median of per-round ratios, not the ratio of medians
    assert paired_ratios([10.0, 30.0, 20.0], [10.0, 10.0, 40.0]) == {
        "median": 1.0,
        "min": 0.5,
        "max": 3.0,
        "n": 3,
    }
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])


def test_a_result_file_says_where_and_when_it_was_measured(tmp_path):
    recording = Recording.begin("engine")
    local = tmp_path / "models" / "model.gguf"
    out = tmp_path / "engine.json"
    written = recording.write(
        out, config={"model": str(local)}, samples={"raw": [1.0, 2.0]}, summary={}, hide=[local]
    )
    stored = json.loads(out.read_text())
    assert stored == written
    assert stored["schema"] == SCHEMA and stored["benchmark"] == "engine"
    assert stored["config"]["model"] == "model.gguf"  # no local paths
    assert str(tmp_path) not in out.read_text()
    machine = stored["machine"]
    assert machine["cpu_model"] and machine["usable_cores"] >= 1
    assert {"load_1m_start", "load_1m_end", "llama_cpp_system_info", "packages"} <= set(machine)
    assert "llama-cpp-python" in machine["packages"]
    assert len(stored["commit"]["sha"]) == 40
    # every raw sample is kept, beside the result file, under raw/ (which git ignores)
    assert "samples" not in stored
    assert json.loads((tmp_path / "raw" / "engine.json").read_text()) == {"samples": {"raw": [1.0, 2.0]}}


def test_strip_moves_the_samples_of_any_result_layout_out_of_the_result(tmp_path):
    from benchmarks.record import write_split

    document = {"models": {"f16": {"servers": {"llmflow": {"64": {
        "output_tok_s": 10.0, "output_tok_s_rounds": [9.0, 10.0], "requests_of_median_round": [{"ttft_s": 1}],
    }}}}}, "samples": [1, 2]}  # fmt: skip
    kept = write_split(tmp_path / "gpu.json", document)
    assert kept == {"models": {"f16": {"servers": {"llmflow": {"64": {
        "output_tok_s": 10.0, "output_tok_s_rounds": [9.0, 10.0]}}}}}}  # fmt: skip
    assert json.loads((tmp_path / "gpu.json").read_text()) == kept
    raw = json.loads((tmp_path / "raw" / "gpu.json").read_text())
    assert raw["samples"] == [1, 2]
    assert raw["models"]["f16"]["servers"]["llmflow"]["64"]["requests_of_median_round"] == [{"ttft_s": 1}]


def engine_result(path: Path, quick: bool) -> None:
    summary = {
        "llmflow_tokens_per_s": spread([100.0, 104.0, 102.0]),
        "raw_tokens_per_s": spread([99.0, 101.0, 100.0]),
        "llmflow_ttft_ms": spread([50.0, 52.0]),
        "raw_ttft_ms": spread([49.0, 51.0]),
        "tokens_per_s_ratio": paired_ratios([100.0, 104.0, 102.0], [99.0, 101.0, 100.0]),
        "ttft_delta_ms": spread([1.0, 1.0]),
    }
    config = {"model": "model.gguf", "threads": 2, "max_tokens": 16, "runs": 3}
    Recording.begin("engine", quick=quick).write(path, config=config, samples={}, summary=summary)


@pytest.mark.parametrize("quick", [False, True])
def test_a_table_is_rendered_with_its_provenance(tmp_path, quick):
    where = tmp_path / "quick" / "engine.json" if quick else tmp_path / "engine.json"
    engine_result(where, quick)
    text = "before\n<!-- BEGIN GENERATED: engine -->\nstale\n<!-- END GENERATED: engine -->\nafter\n"
    rendered = render.render_text(text, tmp_path)
    assert rendered.startswith("before\n<!-- BEGIN GENERATED: engine -->\n") and rendered.endswith("after\n")
    assert "stale" not in rendered
    assert "102.0 (100.0-104.0)" in rendered  # median (min-max)
    assert "python -m benchmarks run engine" in rendered
    assert "1-minute load average" in rendered
    assert ("Smoke run" in rendered) is quick
    assert render.render_text(rendered, tmp_path) == rendered  # rendering twice changes nothing


def test_a_missing_result_says_how_to_make_it(tmp_path):
    text = "<!-- BEGIN GENERATED: peers -->\n<!-- END GENERATED: peers -->\n"
    assert "python -m benchmarks run peers" in render.render_text(text, tmp_path)


def test_every_generated_part_has_a_renderer_and_the_documents_are_up_to_date():
    assert REPO / "README.md" in render.DOCUMENTS and REPO / "docs" / "benchmarks.md" in render.DOCUMENTS
    for document in render.DOCUMENTS:
        for match in render.MARKER.finditer(document.read_text(encoding="utf-8")):
            assert match.group(2) in render.PARTS, match.group(2)
    # a part without a command of its own is re-run by `python -m benchmarks run NAME`
    assert {p.file for p in render.PARTS.values() if not p.rerun} <= set(BY_NAME)
    assert render.render_all(RESULTS, write=False) == [], "run python -m benchmarks render"


def tracked_results() -> list[Path]:
    done = subprocess.run(
        ["git", "ls-files", "-z", "benchmarks/results"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return [REPO / name for name in done.stdout.split("\0") if name]


def test_the_results_in_git_are_summaries_of_at_most_2_mb():
    files = tracked_results()
    assert files, "no result file in git"
    assert sum(path.stat().st_size for path in files if path.exists()) <= 2 * 1024 * 1024
    for path in files:
        assert "/raw/" not in path.as_posix() and "/quick/" not in path.as_posix(), path
        if path.suffix == ".json" and path.exists():
            from benchmarks.record import split_samples

            document = json.loads(path.read_text(encoding="utf-8"))
            assert split_samples(document)[1] is None, (
                f"{path.name} holds raw samples: python -m benchmarks strip"
            )


def test_no_benchmark_imports_a_private_name_of_llmflow():
    for path in (REPO / "benchmarks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmflow"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private and "._" not in node.module, f"{path.name}: {node.module} {private}"
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                value = ast.unparse(node.value)
                assert not value.startswith(("llm", "engine", "model.llm")), (
                    f"{path.name}: {value}.{node.attr}"
                )


def test_gpu_tables_come_from_the_files_the_gpu_scripts_wrote():
    """The GPU parts name their result files and their commands, and show the targets as met or missed."""
    llama = render.section("gpu-llama-cpp", RESULTS)
    assert "benchmarks/results/llama_cpp_gpu_h200_run12.json" in llama
    assert "benchmarks/gpu/bench_llama_cpp_gpu.py" in llama
    assert "missed" in llama and "met" in llama and "over prefill + decode" in llama
    switch = render.section("gpu-llama-cpp-switch", RESULTS)
    assert "llama_cpp_gpu_serving64.json" in switch and "round by round" in switch
    assert "serving factor: server / in process" in switch and "H100" in switch
    assert "sessions_h200.json" in render.section("gpu-sessions", RESULTS)
    images = render.section("gpu-images", RESULTS)
    assert "images_gpu.json" in images and "NVIDIA H100" in images
    for part, file in [("gpu-speculation", "speculation_gpu.json"),
                       ("gpu-speculation-real", "speculation_gpu_smollm2.json")]:  # fmt: skip
        speculation = render.section(part, RESULTS)
        assert file in speculation and "bench_speculation_servers" in speculation
        assert "`llama-server ngram-mod`" in speculation and "same answer as off" in speculation


def test_the_peer_build_uses_the_pinned_llama_cpp_python():
    from benchmarks.peers.build_llama_server import pinned_version

    pin = pinned_version()
    assert f'"llama-cpp-python=={pin}"' in (REPO / "pyproject.toml").read_text()


def test_every_shared_prefix_request_starts_with_the_same_system_prompt(tmp_path):
    from benchmarks.peers.compare_servers import shared_prefix_dataset
    from llmflow.bench.workload import dataset_requests

    path = shared_prefix_dataset(tmp_path / "prefix.jsonl", 6, system_words=50, seed=0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    systems = {row["messages"][0]["content"] for row in rows}
    questions = {row["messages"][1]["content"] for row in rows}
    assert len(systems) == 1 and len(questions) == 6
    assert len(dataset_requests(path, 6, max_tokens=8)) == 6  # llmflow bench reads it


def test_each_round_asks_new_questions_after_the_same_system_prompt(tmp_path):
    from benchmarks.peers.compare_servers import Workload
    from llmflow.bench import BenchOptions

    workload = Workload("shared prefix", BenchOptions(url="", seed=3), prefix=(4, 50))
    first, second = workload.for_round(0, tmp_path), workload.for_round(1, tmp_path)
    assert (first.seed, second.seed) == (3, 4)  # synthetic prompts differ between rounds too
    rounds = [
        [json.loads(line)["messages"] for line in o.dataset.read_text().splitlines()] for o in (first, second)
    ]
    assert {m[0]["content"] for r in rounds for m in r} == {rounds[0][0][0]["content"]}
    assert not {m[1]["content"] for m in rounds[0]} & {m[1]["content"] for m in rounds[1]}


def test_the_recorded_command_names_no_local_paths():
    from benchmarks.record import command_line

    script = str(REPO / "benchmarks" / "peers" / "compare_servers.py")
    argv = [script, "--example-server", "/somewhere/else/server.py", "--rounds", "5"]
    expected = "python -m benchmarks.peers.compare_servers --example-server <server.py> --rounds 5"
    assert command_line(argv) == expected


def test_a_folder_without_the_gpu_results_renders_the_gpu_parts_as_absent(tmp_path):
    """`render --results benchmarks/results/quick` (a smoke run of the CPU benchmarks) must not
    fail on the GPU parts, whose files only a GPU machine writes."""
    text = "<!-- BEGIN GENERATED: gpu-llama-cpp -->\nold\n<!-- END GENERATED: gpu-llama-cpp -->\n"
    rendered = render.render_text(text, tmp_path)
    assert "No result yet" in rendered and "`benchmarks/results/llama_cpp_gpu_h200_run12.json`" in rendered
