"""BENCHMARKS.md's GPU tables, rendered from the files the GPU scripts wrote on the GPU machine.

The GPU scripts predate the common result format (`benchmarks/record.py`) and keep their own
layouts; each renderer here reads one script's layout as the script wrote it, so no GPU number in
the documents is typed by hand. A file assembled by hand is not rendered at all.
"""

from __future__ import annotations

import json
import statistics
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

Result = dict[str, Any]


def num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def target(value: float | None, goal: float, above: bool = True) -> str:
    if value is None:
        return "-"
    met = value >= goal if above else value <= goal
    sign = "≥" if above else "≤"
    return f"{num(value, 2 if value >= 0.1 else 3)} (target {sign} {goal}: {'met' if met else 'missed'})"


# -- llama.cpp engines against llama-server (benchmarks/gpu/bench_llama_cpp_gpu.py) ---------------
def _is_llmflow(name: str) -> bool:
    return name == "llmflow" or name.startswith("llmflow ")


def llama_cpp_gpu(d: Result) -> str:
    """One row per model, level and llmflow run (llmflow serve, then each of its variants), beside
    every llama-server run and llama-batched-bench."""
    names = list(next(iter(d["models"].values()))["servers"])
    peers = [name for name in names if not _is_llmflow(name)]
    ours_names = [name for name in names if _is_llmflow(name)]
    rows = []
    for label, entry in d["models"].items():
        ceiling = entry["batched_bench"]["streams"]["decode_tok_s"]
        for level in entry["servers"]["llmflow"]:
            for name in ours_names:
                row = entry["servers"][name][level]
                goal = 0.97 if level == "1" else 1.0
                cells = [label, level, *([f"`{name}`"] if len(ours_names) > 1 else []), _server_cell(row)]
                for peer in peers:
                    other = entry["servers"][peer].get(level)
                    rate = row["output_tok_s"] / other["output_tok_s"] if other else None
                    cells += [_server_cell(other) if other else "-", target(rate, goal)]
                rows.append([*cells, num(ceiling.get(level)), _ceiling_ratio(row, ceiling.get(level), level)])
    header = ["model", "concurrency", *(["llmflow run"] if len(ours_names) > 1 else []), "llmflow serve"]
    for peer in peers:
        header += [f"`{peer}`", f"llmflow / `{peer}`"]
    header += ["llama-batched-bench decode", "llmflow / batched-bench"]
    c = d["config"]
    intro = (
        f"Output tokens/s of the server's median round of {c['rounds']} [min-max over rounds] "
        f"(TTFT p50 / ITL p50 in ms); {c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy. "
        "A row where requests failed shows how many completed: it is a failure, not a speed.\n\n"
    )
    return intro + table(header, rows) + "\n" + _unified(d) + "\n" + _step_split(d)


def llama_cpp_runs(files: list[Result]) -> str:
    """Each run's table under its commit, then the targets of all of them side by side."""
    runs = [
        f"**Run {i} of {len(files)}** (commit `{d['commit']}`). " + llama_cpp_gpu(d)
        for i, d in enumerate(files, start=1)
    ]
    return "\n".join([*runs, llama_cpp_targets(files)])


def llama_cpp_targets(files: list[Result]) -> str:
    """The issue's three targets per run and model, beside what the 0.9 one leaves out: the engine
    in process (its own step, no HTTP) and batched-bench counted over its prefill and decode."""
    rows = []
    for i, d in enumerate(files, start=1):
        for label, entry in d["models"].items():
            ours, peer = entry["servers"]["llmflow"], entry["servers"]["llama-server"]
            ratios = {level: ours[level]["output_tok_s"] / peer[level]["output_tok_s"] for level in ours}
            lowest = min(ratios, key=ratios.__getitem__)
            top = max(ours, key=int)
            bench = entry["batched_bench"]["streams"]
            decode = bench["decode_tok_s"][top]
            whole = next(r for r in bench["rows"] if r["pl"] == int(top))
            whole_rate = whole["pl"] * whole["tg"] / (whole["t_pp"] + whole["t_tg"])
            split = entry.get("step_split")
            engine = num(_engine_rate(split, int(top)) / decode, 2) if split else "-"
            rows.append(
                [str(i), label, target(ratios["1"], 0.97), f"{num(ratios[lowest], 2)} (c={lowest})",
                 _ceiling_ratio(ours[top], decode, top), engine, num(whole_rate),
                 num(ours[top]["output_tok_s"] / whole_rate, 2)]
            )  # fmt: skip
    top = max(next(iter(files[0]["models"].values()))["servers"]["llmflow"], key=int)
    header = ["run", "model", "single stream / `llama-server`", "lowest llmflow / `llama-server`",
              f"llmflow / batched-bench decode at {top}", "engine in process / batched-bench decode",
              "batched-bench over prefill + decode tok/s", "llmflow / that"]  # fmt: skip
    return (
        f"The targets run by run, and at {top} streams what batched-bench's decode figure leaves out: "
        "the engine in process decodes at the concurrency divided by its median full-width step (no "
        "HTTP, no prefill), and batched-bench's generated tokens over its prefill and decode together "
        "are the ceiling for a workload that brings its prompts:\n\n" + table(header, rows)
    )


def _server_cell(row: Result) -> str:
    summary = row["summary_of_median_round"]
    low, high = row["output_tok_s_min_max"]
    if summary["failed"]:
        total = summary["completed"] + summary["failed"]
        return f"{num(row['output_tok_s'])} ({summary['completed']} of {total} requests completed)"
    timing = f"{num(row['ttft_p50_s'], 0, 1000)} / {num(row['itl_p50_s'], 1, 1000)}"
    return f"{num(row['output_tok_s'])} [{num(low, 0)}-{num(high, 0)}] ({timing})"


def _ceiling_ratio(row: Result, ceiling: float | None, level: str) -> str:
    if not ceiling:
        return "-"
    value = row["output_tok_s"] / ceiling
    return target(value, 0.9) if level == "64" else num(value, 2)


def _unified(d: Result) -> str:
    """llama-batched-bench with a KV stream per sequence against one unified KV pool."""
    rows = []
    for label, entry in d["models"].items():
        streams, unified = entry["batched_bench"]["streams"], entry["batched_bench"].get("unified", {})
        for level, rate in streams["decode_tok_s"].items():
            rows.append([label, level, num(rate), num(unified.get("decode_tok_s", {}).get(level))])
    title = "`llama-batched-bench` decode tok/s, a KV stream per sequence against one unified pool (`-kvu`)"
    return title + ":\n\n" + table(["model", "sequences", "streams", "unified"], rows)


def _step_split(d: Result) -> str:
    """Where an in-process step of the engine goes, at the highest concurrency."""
    rows = []
    for label, entry in d["models"].items():
        s = entry.get("step_split")
        if not s:
            continue
        per_sample = s["sample_s_median"] / s["engine_options"]["parallel"]
        rows.append(
            [label, num(s["step_s_median"], 1, 1000), num(s["gpu_s_median"], 1, 1000),
             f"{num(s['sample_s_median'], 1, 1000)} ({num(per_sample, 2, 1000)} a sequence)",
             f"{num(s['python_s_median'], 2, 1000)} (p90 {num(s['python_s_p90'], 2, 1000)})",
             str(s["full_decode_steps"])]
        )  # fmt: skip
    if not rows:
        return ""
    header = ["model", "step ms", "forward pass (GPU, waited for) ms", "samplers (CPU) ms",
              "the rest (scheduler's Python) ms", "steps measured"]  # fmt: skip
    return "Where a step goes, the engine in process at full concurrency (medians):\n\n" + table(header, rows)


def llama_cpp_rounds(d: Result) -> str:
    """Each server's output tokens/s round by round (round 1 runs the levels upwards, round 2
    downwards), and its inter-token gap: what a median hides when a server changes between rounds."""
    names = list(next(iter(d["models"].values()))["servers"])
    rows = []
    for label, entry in d["models"].items():
        for level in entry["servers"]["llmflow"]:
            cells = [label, level]
            for name in names:
                row = entry["servers"][name].get(level)
                if row is None:
                    cells.append("-")
                    continue
                itl = " / ".join(num(s["itl_s"]["median"], 1, 1000) for s in row["summaries_of_rounds"])
                cells.append(f"{' / '.join(num(v, 0) for v in row['output_tok_s_rounds'])} ({itl})")
            rows.append(cells)
    return (
        "Output tokens/s round by round, round 1 / round 2 (ITL p50 in ms, round 1 / round 2); round 1 "
        "runs the concurrency levels upwards from a freshly started server, round 2 downwards:\n\n"
        + table(["model", "concurrency", *(f"`{n}`" for n in names)], rows)
    )


def switch_interval(d: Result) -> str:
    """llmflow serve with Python's GIL switch interval against its variants, round by round (each
    round runs every server once), beside llama-server."""
    names = list(next(iter(d["models"].values()))["servers"])
    ours = [n for n in names if _is_llmflow(n)]
    rows = []
    for label, entry in d["models"].items():
        for level, base in entry["servers"]["llmflow"].items():
            cells = [label, level, _server_cell(base)]
            for name in ours[1:]:
                row = entry["servers"][name][level]
                paired = [
                    a / b
                    for a, b in zip(row["output_tok_s_rounds"], base["output_tok_s_rounds"], strict=True)
                ]
                cells += [_server_cell(row), _spread(paired)]
            cells += [_server_cell(entry["servers"][n][level]) for n in names if not _is_llmflow(n)]
            rows.append(cells)
    header = ["model", "concurrency", "`llmflow` (Python's 5 ms)"]
    for name in ours[1:]:
        header += [f"`{name}`", "/ `llmflow`, round by round"]
    header += [f"`{n}`" for n in names if not _is_llmflow(n)]
    c = d["config"]
    return (
        f"Output tokens/s of the server's median round of {c['rounds']} [min-max over rounds] (TTFT p50 / "
        f"ITL p50 in ms); {c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy. "
        "Ratios are taken round by round (the servers of one round ran one after the other), "
        "median (min-max):\n\n" + table(header, rows)
    )


def _spread(values: list[float]) -> str:
    return f"{num(statistics.median(values), 3)} ({num(min(values), 3)}-{num(max(values), 3)})"


def served_steps(files: list[Result]) -> str:
    """The engine's full-width steps timed inside llmflow serve against in process, and what each
    server variant streamed."""
    d = files[0]
    label, entry = next(iter(d["models"].items()))
    g = entry["served_steps"]
    split_rows = []
    for workload, r in g["in_process"].items():
        split_rows.append([f"in process, {workload}", *_split_cells(r["full_steps"])])
    for name, r in g["servers"].items():
        split_rows.append([f"`llmflow serve` {name}, both workloads", *_split_cells(r["full_steps"])])
    split_header = ["where", "steps", "step ms", "start to start ms", "forward pass ms",
                    "sampling ms (its CPU ms)", "filling the batch ms", "the rest ms"]  # fmt: skip
    speed_rows = []
    for name, r in g["servers"].items():
        cells = [f"`{name}`"]
        for workload, row in r["rows"].items():
            ratio = row["output_tok_s"] / g["in_process"][workload]["generated_tok_s"]
            cells.append(f"{_server_cell(row)}, {num(ratio, 2)} of in process")
        speed_rows.append(cells)
    in_process = "; ".join(f"{w}: {num(r['generated_tok_s'])}" for w, r in g["in_process"].items())
    return (
        f"{label}, {g['concurrency']} streams, greedy. Medians over the full-width decode steps "
        f"(every sequence decoding, no prompt tokens), the servers' steps of both workloads "
        f"together:\n\n"
        + table(split_header, split_rows)
        + f"\n\nOutput tokens/s over HTTP (as the server reports them) of the server's median round of "
        f"{d['config']['rounds']} [min-max over rounds] (TTFT p50 / ITL p50 in ms); "
        f"the engine in process generated {in_process} tok/s:\n\n"
        + table(["llmflow serve", *(f"{w} (prompt/answer)" for w in g["workloads"])], speed_rows)
    )


def _split_cells(s: Result | None) -> list[str]:
    if not s:
        return ["-"] * 7
    return [str(s["steps"]), num(s["step_ms"], 2), num(s["period_ms"], 2), num(s["gpu_ms"], 2),
            f"{num(s['sample_ms'], 2)} ({num(s['sample_cpu_ms'], 2)})", num(s["fill_ms"], 2),
            num(s["rest_ms"], 2)]  # fmt: skip


# -- the distance to llama-batched-bench, split (bench_llama_cpp_gpu.py --gap) -------------------
def llama_cpp_gap(files: list[Result]) -> str:
    """Each run's workloads and variants, then the transformers reference (a file of its own)."""
    runs = [d for d in files if any("gap" in e for e in d["models"].values())]
    parts = []
    for i, d in enumerate(runs, start=1):
        label, entry = next((k, e) for k, e in d["models"].items() if "gap" in e)
        head = f"**Run {i} of {len(runs)}, {label}.** " if len(runs) > 1 else f"**{label}.** "
        g = entry["gap"]
        parts.append(head + _gap_workloads(d, g) + "\n" + _gap_product(g) + "\n" + _gap_variants(g))
    for d in files:
        if "reference_transformers" in d:
            parts.append(_reference(d["reference_transformers"], runs))
    return "\n".join(parts)


def _engine_rate(split: Result, level: int) -> float:
    """Tokens a second of the engine's full-width decode steps: `level` tokens a median step."""
    return level / split["step_s_median"]


def _gap_workloads(d: Result, g: Result) -> str:
    level, rows = g["concurrency"], []
    key = str(level)
    for name in g["workloads"]:
        bench = g["batched_bench"][name]["streams"]
        ceiling = bench["decode_tok_s"][key]
        split = g["in_process"].get("default", {}).get(name)
        served = g["servers"].get("rows", {}).get("default", {}).get(name)
        if not split or not served:
            continue
        wall = split["wall_by_step_kind_s"]
        shares = "/".join(
            num(wall[k] / split["wall_s"] * 100, 0)
            for k in ("full_decode", "with_prompt_tokens", "partial_decode")
        )
        low, high = served["output_tok_s_min_max"]
        rows.append(
            [name, num(ceiling), num(bench["generated_tok_s"][key]),
             f"{num(split['step_s_median'], 1, 1000)} ({num(_engine_rate(split, level) / ceiling, 2)})",
             f"{num(split['generated_tok_s'])} ({num(split['generated_tok_s'] / ceiling, 2)})", shares,
             f"{num(served['output_tok_s'])} [{num(low, 0)}-{num(high, 0)}] "
             f"({num(served['output_tok_s'] / ceiling, 2)})",
             f"{num(served['ttft_p50_s'], 0, 1000)} / {num(served['itl_p50_s'], 1, 1000)}"]
        )  # fmt: skip
    header = ["prompt/answer tokens", "batched-bench decode tok/s", "batched-bench with its prefill tok/s",
              "engine full step ms (its rate / decode)", "engine in process tok/s (/ decode)",
              "wave wall % full / prompt / partial steps", "llmflow serve tok/s (/ decode)",
              "serve TTFT p50 / ITL p50 ms"]  # fmt: skip
    c = d["config"]
    intro = (
        f"{level} streams, greedy; batched-bench: `-npl {level}` with the same prompt and answer lengths. "
        f"In process: one wave of {level} generations on the engine (generated tokens / wall). llmflow "
        f"serve: the median of {c['rounds']} rounds of {c['waves']} x {level} requests over HTTP, output "
        "tokens as the server reports them (usage). In brackets: the ratio to batched-bench's decode.\n\n"
    )
    return intro + table(header, rows)


def _gap_product(g: Result) -> str:
    """llmflow serve / batched-bench decode as a product of three measured ratios."""
    level, key, rows = g["concurrency"], str(g["concurrency"]), []
    for name in g["workloads"]:
        split = g["in_process"].get("default", {}).get(name)
        served = g["servers"].get("rows", {}).get("default", {}).get(name)
        if not split or not served:
            continue
        ceiling = g["batched_bench"][name]["streams"]["decode_tok_s"][key]
        engine = _engine_rate(split, level)
        factors = [
            engine / ceiling,
            split["generated_tok_s"] / engine,
            served["output_tok_s"] / split["generated_tok_s"],
        ]
        rows.append([name, *(num(f, 2) for f in factors), num(served["output_tok_s"] / ceiling, 2)])
    header = ["prompt/answer", "engine step: batched-bench step / full step",
              "the wave: in process / full-step rate", "serving: llmflow serve / in process",
              "product: llmflow serve / batched-bench decode"]  # fmt: skip
    return "The ratio to batched-bench's decode as a product of the three measured parts:\n\n" + table(
        header, rows
    )


def _gap_variants(g: Result) -> str:
    level, key, rows = g["concurrency"], str(g["concurrency"]), []
    for config, spec in g["configs"].items():
        for name in spec["workloads"]:
            split = g["in_process"].get(config, {}).get(name)
            served = g["servers"].get("rows", {}).get(config, {}).get(name)
            if not split:
                continue
            kind = "unified" if "kv_unified=true" in spec["engine_options"] else "streams"
            ceiling = g["batched_bench"][name].get(kind, {}).get("decode_tok_s", {}).get(key)
            rows.append(
                [config, name, num(ceiling), num(split["step_s_median"], 2, 1000),
                 num(split["gpu_s_median"], 2, 1000), num(split["sample_s_median"], 2, 1000),
                 num(split["python_s_median"], 2, 1000), num(split["generated_tok_s"]),
                 num(served["output_tok_s"]) if served else "in process only"]
            )  # fmt: skip
    header = ["variant", "prompt/answer", "batched-bench decode (its KV layout)", "step ms",
              "forward pass ms", "samplers ms", "Python ms", "in process tok/s",
              "llmflow serve tok/s"]  # fmt: skip
    note = (
        f"Engine variants at {level} streams (step medians of full-width decode steps): `default` is this "
        "commit (one argmax over all greedy rows), `rowwise_sampling` the sampling before it (an argmax "
        "call per sequence), `kv_unified` one KV pool (`--engine-option kv_unified=true`, against "
        "batched-bench `-kvu`), `threaded_argmax` the one argmax split over 4 threads:\n\n"
    )
    return note + table(header, rows)


def _reference(r: Result, runs: list[Result]) -> str:
    if r.get("error"):
        return f"The transformers engine did not run: {r['error'][:300]}\n"
    prompt, answer = r["workload"]
    rows = [[level, f"{num(row['output_tok_s'])} [{num(row['output_tok_s_min_max'][0], 0)}-"
             f"{num(row['output_tok_s_min_max'][1], 0)}]",
             f"{num(row['ttft_p50_s'], 0, 1000)} / {num(row['itl_p50_s'], 1, 1000)}"]
            for level, row in r["rows"].items()]  # fmt: skip
    options = " ".join(part for part in r["command"] if "=" in part)
    return (
        f"The transformers engine on the same shape for reference (random bf16 weights of the Llama-3-8B "
        f"shape, the same tokenizer), `llmflow serve` with `{options}`, {prompt}-token prompts, {answer} "
        "tokens, output tokens as the server reports them:\n\n"
        + table(["streams", "llmflow serve (transformers) tok/s [min-max]", "TTFT p50 / ITL p50 ms"], rows)
    )


# -- transformers engine (benchmarks/bench_transformers_gpu.py) ----------------------------------
TRANSFORMERS_PATHS = (
    ("one stream, static cache, compiled", "static"),
    ("one stream, dynamic cache", "dynamic"),
    ("64 streams, continuous batching, greedy", "batch"),
    ("64 streams with the sampling processors on", "batch_sampling"),
)


def transformers_gpu(files: list[Result]) -> str:
    rows = []
    for d in files:
        sections, page = d["sections"], d["setup"].get("page_size", "-")
        for title, key in TRANSFORMERS_PATHS:
            raw, ours = sections.get(f"raw_{key}"), sections.get(f"llmflow_{key}")
            if not raw or not ours:
                continue
            where = f"{title}, page {page}" if key.startswith("batch") else title
            ttft = f" (TTFT {num(ours['ttft_s'], 0, 1000)} ms)" if "ttft_s" in ours else ""
            rate = num(ours["tok_s"] / raw["tok_s"], 2)
            rows.append([where, num(raw["tok_s"]), num(ours["tok_s"]) + ttft, rate])
    setup = files[0]["setup"]
    intro = (
        f"{setup['model']} ({setup['dtype'].removeprefix('torch.')}, "
        f"{num(setup['weight_bytes'], 2, 1e-9)} GB), "
        f"{setup['prompt_tokens']}-token prompts, {setup['new_tokens']} new tokens, greedy; "
        f"{setup['gpu']}, torch {setup['torch']}, transformers {setup['transformers']}, "
        f"{setup['attn_implementation']} attention. A device-to-device copy moved "
        f"{num(setup['copy_bandwidth_bytes_s'], 2, 1e-12)} TB/s: reading every weight once a token caps "
        f"one stream at {num(setup['roofline_tok_s_measured'], 0)} tok/s.\n\n"
    )
    return intro + table(["path", "raw transformers tok/s", "llmflow tok/s", "llmflow / raw"], rows)


# -- ExLlamaV2 engine (benchmarks/bench_exllamav2_gpu.py) ----------------------------------------
def exllamav2_gpu(files: list[Result]) -> str:
    rows = []
    for d in files:
        for r in d["results"]:
            spread = r["llmflow_tokens_per_s_runs"] + r["raw_tokens_per_s_runs"]
            rows.append(
                [r["shape"], r["cache_type"], str(d["runs"]), num(r["llmflow_tokens_per_s"]),
                 num(r["raw_tokens_per_s"]), target(r["tokens_per_s_ratio"], 0.97),
                 f"{num(r['llmflow_ttft_ms'])} / {num(r['raw_ttft_ms'])}",
                 f"{num(min(spread), 0)}-{num(max(spread), 0)}",
                 f"{num(r['llmflow_fraction_of_roofline'] * 100, 0)}%"]
            )  # fmt: skip
    header = ["model", "KV cache", "runs each", "llmflow tok/s", "ExLlamaV2 tok/s", "ratio",
              "TTFT ms llmflow / ExLlamaV2", "per-run spread tok/s", "of the HBM roofline"]  # fmt: skip
    machine = files[0]["machine"]
    return (
        f"Medians of alternated runs; {machine['gpu']}, torch {machine['torch']}, exllamav2 "
        f"{machine['exllamav2']}.\n\n" + table(header, rows)
    )


# -- the parts of the documents these write -----------------------------------------------------
#: generated part -> (result files, renderer of their contents)
def sessions_gpu(files: list[Any]) -> str:
    from benchmarks.render import sessions  # the CPU table's renderer (render imports this module)

    return sessions(files[0])


GPU_PARTS: dict[str, tuple[tuple[str, ...], Callable[[Any], str]]] = {
    "gpu-sessions": (("sessions_h200.json",), sessions_gpu),
    "gpu-llama-cpp": (
        ("llama_cpp_gpu_h200_run12.json", "llama_cpp_gpu_h200_run2.json", "llama_cpp_gpu_h200_run3.json"),
        llama_cpp_runs,
    ),
    "gpu-llama-cpp-run1": (("llama_cpp_gpu_h200_run1.json",), lambda files: llama_cpp_gpu(files[0])),
    "gpu-llama-cpp-peers": (
        ("llama_cpp_gpu_h200_run6.json",),
        lambda files: llama_cpp_gpu(files[0]) + "\n" + llama_cpp_rounds(files[0]),
    ),
    "gpu-llama-cpp-variants": (
        ("llama_cpp_gpu_h200_run7.json",),
        lambda files: llama_cpp_gpu(files[0]) + "\n" + llama_cpp_rounds(files[0]),
    ),
    "gpu-llama-cpp-served-steps": (("llama_cpp_gpu_h200_run10.json",), served_steps),
    "gpu-llama-cpp-switch": (("llama_cpp_gpu_h200_run11.json",), lambda files: switch_interval(files[0])),
    "gpu-llama-server-rounds": (
        ("llama_cpp_gpu_h200_run8.json", "llama_cpp_gpu_h200_run9.json"),
        lambda files: "\n".join(
            f"**Run {i} of {len(files)}.** " + llama_cpp_rounds(d) for i, d in enumerate(files, start=1)
        ),
    ),
    "gpu-llama-cpp-gap": (
        (
            "llama_cpp_gpu_h200_run4.json",
            "llama_cpp_gpu_h200_run5.json",
            "llama_cpp_gpu_h200_run4_transformers.json",
        ),
        llama_cpp_gap,
    ),
    "gpu-transformers": (
        ("transformers_gpu.json", "transformers_gpu_batch_page64.json", "transformers_gpu_batch_page32.json"),
        transformers_gpu,
    ),
    "gpu-exllamav2": (("exllamav2_gpu_8b_r11.json",), exllamav2_gpu),
}


def _short(commit: str | dict) -> str:
    """A full SHA as its first 10 digits; anything else (a SHA with a note) as written. A
    `Recording`'s commit is a dict with the SHA."""
    if isinstance(commit, dict):
        commit = commit["sha"]
    return commit[:10] if len(commit) == 40 and all(c in string.hexdigits for c in commit) else commit


def gpu_section(name: str, results: Path) -> str:
    names, render = GPU_PARTS[name]
    absent = [n for n in names if not (results / n).is_file()]
    if absent:  # e.g. a smoke run's folder: `make bench` runs the CPU benchmarks only
        listed = ", ".join(f"`{n}`" for n in absent)
        return f"No result in this folder: {listed}, written on a GPU machine by the script named above.\n"
    files = [json.loads((results / n).read_text(encoding="utf-8")) for n in names]
    sources = ", ".join(f"`benchmarks/results/{n}`" for n in names)
    commands = "; ".join(f"`{d['command']}`" for d in files if "command" in d)
    commits = {_short(d["commit"]) for d in files if "commit" in d}
    origin = f"Result {sources}" + (f", written by {commands}" if commands else "")
    origin += f" at commit `{', '.join(sorted(commits))}`" if commits else ""
    runs = "one run of the machine" if len(files) == 1 else f"{len(files)} runs, one machine"
    return render(files) + "\n" + origin + f" on the GPU machine ({runs}).\n"
