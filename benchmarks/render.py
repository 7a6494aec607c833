"""Write BENCHMARKS.md's tables and the README's measured numbers from the stored result files.

Each generated part sits between `<!-- BEGIN GENERATED: name -->` and `<!-- END GENERATED: name -->`
and is rewritten whole; the prose around it is not touched. A full result
(`benchmarks/results/<name>.json`) is preferred; without one, the smoke run's
(`benchmarks/results/quick/<name>.json`) is shown, marked as such. Under every table: the result
file, the command that wrote it, the commit, the CPU and the load average at start and end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.record import SCHEMA
from benchmarks.render_gpu import GPU_PARTS, gpu_section
from benchmarks.suite import BY_NAME

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = (REPO / "BENCHMARKS.md", REPO / "README.md")
MARKER = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) -->\n?)(.*?)(<!-- END GENERATED: \2 -->)", re.DOTALL)
Result = dict[str, Any]


def load(results: Path, name: str) -> tuple[Result | None, str | None]:
    """The result and its name as the documents show it (under `benchmarks/results/`)."""
    for path in (results / f"{name}.json", results / "quick" / f"{name}.json"):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if document.get("schema") == SCHEMA:
            return document, _shown(path, results)
    return None, None


def _shown(path: Path, results: Path) -> str:
    """A result's path from the repository's root (a folder outside it, as tests use, stands in
    for `benchmarks/results/`)."""
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return f"benchmarks/results/{path.relative_to(results).as_posix()}"


# -- numbers ------------------------------------------------------------------------------------
def num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def med(s: dict | None, digits: int = 1, scale: float = 1.0) -> str:
    """A spread as `median (min-max)`; one run: just the value."""
    if not s:
        return "-"
    if s.get("n", 1) == 1 or s["min"] == s["max"]:
        return num(s["median"], digits, scale)
    return (
        f"{num(s['median'], digits, scale)} ({num(s['min'], digits, scale)}-{num(s['max'], digits, scale)})"
    )


def threads(n: int) -> str:
    return plural(n, "thread")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def provenance(document: Result, path: str) -> str:
    """The line under every table: where the numbers come from, and how busy the machine was."""
    machine, commit = document["machine"], document["commit"]
    sha = (commit.get("sha") or "unknown")[:10] + (" + changes" if commit.get("dirty") else "")
    load = f"{num(machine.get('load_1m_start'), 2)} → {num(machine.get('load_1m_end'), 2)}"
    quick = " --quick" if document["quick"] else ""
    line = (
        f"Result `{path}`, written by `{document['command']}` "
        f"(re-run: `python -m benchmarks run {Path(path).stem}{quick}`) "
        f"at commit `{sha}` on {document['started_at'][:10]}; {machine['cpu_model']}, "
        f"{machine['usable_cores']} usable cores; 1-minute load average {load}."
    )
    notes = "".join(f" {note}." for note in document.get("notes", []))
    if document["quick"]:
        line = "**Smoke run (`--quick`): few rounds, short answers; not a measurement to quote.** " + line
    return line + notes + "\n"


def missing(name: str) -> str:
    return f"No result yet: `python -m benchmarks run {name}` writes `benchmarks/results/{name}.json`.\n"


# -- one renderer per result --------------------------------------------------------------------
def engine(d: Result) -> str:
    s, c = d["summary"], d["config"]
    intro = (
        f"{c['model']}, {threads(c['threads'])}, {c['max_tokens']} tokens, greedy, {c['runs']} alternated "
        "runs from an empty KV cache; median (min-max).\n\n"
    )
    rows = [
        ["llmflow `LLM.stream`", med(s["llmflow_tokens_per_s"]), med(s["llmflow_ttft_ms"])],
        ["raw llama-cpp-python", med(s["raw_tokens_per_s"]), med(s["raw_ttft_ms"])],
        [
            "**llmflow / raw, round by round**",
            f"**{med(s['tokens_per_s_ratio'], 3)}** (target >= 0.98)",
            f"**{med(s['ttft_delta_ms'], 1)} ms** (target <= +5 ms)",
        ],
    ]
    return intro + table(["path", "decode tok/s", "TTFT ms"], rows)


def flash_attn(d: Result) -> str:
    s, c = d["summary"], d["config"]
    intro = (
        f"{c['model']}, {threads(c['threads'])}, {c['prompt_tokens']}-token prompts, "
        f"{c['max_tokens']} tokens (every answer to the end), greedy, {c['runs']} alternated runs; "
        "median (min-max), ratios round by round.\n\n"
    )
    rows = [
        [f"`{engine}`", med(e["off_tokens_per_s"]), med(e["on_tokens_per_s"]),
         f"**{med(e['tokens_per_s_ratio_on_off'], 3)}**", med(e["off_ttft_ms"]), med(e["on_ttft_ms"]),
         f"**{med(e['ttft_ratio_on_off'], 3)}**"]
        for engine, e in s.items()
    ]  # fmt: skip
    header = ["engine", "decode tok/s, off", "on", "on / off", "TTFT ms, off", "on", "on / off"]
    return intro + table(header, rows)


def tracing(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [
        [mode, med(s[f"{mode}_tokens_per_s"]), med(s[f"{mode}_ttft_ms"])] for mode in ("off", "on", "timings")
    ]
    wrapper = s["wrapper_us_per_chunk"]
    return (
        f"{c['model']}, {c['max_tokens']} tokens, {c['runs']} rounds, modes alternated; median (min-max).\n\n"
        + table(["tracing", "decode tok/s", "TTFT ms"], rows)
        + f"\nOn / off, round by round: **{med(s['tokens_per_s_ratio_on_off'], 3)}** (target >= 0.98). "
        f"The observing wrapper itself, on a synthetic stream: {med(wrapper['timings'], 2)} µs per chunk "
        f"with timings only, {med(wrapper['traced'], 2)} µs traced. "
        f"Traces recorded: {s['traces_recorded']}.\n"
    )


def mlflow_load(d: Result) -> str:
    s, c = d["summary"], d["config"]
    fresh = s["fresh_process_s"]
    rows = [[f"in process: {kind}", med(v, 3)] for kind, v in s["in_process_s"].items()]
    for kind, parts in fresh.items():
        rows += [[f"fresh process ({kind}): {part}", med(v, 3)] for part, v in parts.items()]
    rows += [["`log_model`", num(s["log_model_s"], 3)], ["`save_model`", num(s["save_model_s"], 3)]]
    return (
        f"{c['model']}; {c['runs']} in-process loads and {c['processes']} fresh processes per kind, "
        "kinds alternated; median (min-max). Target: in process <= 1 s.\n\n"
        + table(["load", "seconds"], rows)
    )


def http(d: Result) -> str:
    s, c = d["summary"], d["config"]
    spreads = s["spread"]
    rows = [
        [f"`{way}`", med(v["decode_tok_s"]), med(v["ttft_ms"]), med(v["cpu_us_per_chunk"], 0)]
        for way, v in spreads.items()
    ]
    ratio_rows = [[name, med(value, 3)] for name, value in s["ratios"].items()]
    return (
        f"{c['model']}, {threads(c['threads'])}, {c['max_tokens']} tokens, {c['runs']} alternated rounds; "
        "median (min-max).\n\n"
        + table(["way", "decode tok/s", "TTFT ms", "this process's CPU µs/chunk"], rows)
        + "\n"
        + table(
            ["ratio, round by round (targets: HTTP/in-process >= 0.97, TTFT overhead <= 10 ms)", "value"],
            ratio_rows,
        )
    )


def server_cpu(d: Result) -> str:
    s = d["summary"]
    rows = [[name, num(us, 0)] for name, us in s["us_per_event_by_thread"].items()]
    return (
        f"{s['events']} streamed events. The other threads, by CPU time, are the generation worker and "
        "llama.cpp's threads (Python 3.11 leaves OS threads unnamed, so they are told apart only by what "
        "they spend).\n\n" + table(["server thread", "CPU µs per event"], rows)
    )


def serving_steps(d: Result) -> str:
    s, c = d["summary"], d["config"]
    servers = ["default", *(v.split("=", 1)[0] for v in c["variant"])]
    header = ["streams", "ceiling tok/s", "in process tok/s"]
    for name in servers:
        label = "llmflow serve" if name == "default" else f"llmflow serve {name}"
        header += [f"{label} tok/s (ITL p50 ms)", "/ in process"]
    rows = []
    for level, row in s.items():
        cells = [level, num(row["ceiling_tokens_per_s"], 0), med(row["in_process_tokens_per_s"], 0)]
        for name in servers:
            r = row[name]
            speed = f"{med(r['output_tokens_per_s'], 0)} ({med(r['itl_p50_ms'])})"
            if r["failed"]:
                speed += f", {r['failed']} requests failed"
            cells += [speed, num(r["over_in_process"], 2)]
        rows.append(cells)
    return (
        f"A step of every running stream sleeps {num(c['step_ms'])} ms (one pass, as on a GPU); "
        f"{c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, {c['waves']} waves a level; "
        f"median (min-max) of {c['rounds']} rounds, the servers alternating.\n\n" + table(header, rows)
    )


def batching(d: Result) -> str:
    s, c = d["summary"], d["config"]
    widths = [str(w) for w in c["widths"]]
    rows = []
    for quant, q in s.items():
        engine_rows = q["engine"]
        rows.append(
            [
                quant,
                med(engine_rows.get("1", {}).get("output_tok_s")),
                med(engine_rows.get("8", {}).get("output_tok_s")),
                f"**{med(q.get('engine_8_over_1'), 2)}**",
                *[med(q["raw_decode_tok_s"].get(w)) for w in widths],
                med(q.get("raw_8_over_1"), 2),
                med(q["prompt_tok_s"]),
            ]
        )
    header = [
        "weights", "engine, 1 stream tok/s", "engine, 8 streams tok/s", "8 / 1",
        *[f"raw `llama_decode` w={w}" for w in widths], "raw 8 / 1",
        f"prompt processing ({c['ceiling_tokens']})",
    ]  # fmt: skip
    return (
        f"{c['model']} and its requantizations, {threads(c['threads'])}, {c['prompt_tokens']}-token prompts, "
        f"{c['max_tokens']} tokens, {plural(c['rounds'], 'round')} (weight types and levels alternated); "
        "tokens/s, "
        "median (min-max).\n\n" + table(header, rows)
    )


def step_shapes(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [[f"`{way}`", med(v)] for way, v in s["tokens_per_s"].items()]
    return (
        f"{c['model']}, {threads(c['threads'])}: {c['width']} sequences decoding ({c['depth']} tokens deep) "
        f"while a {c['prompt']}-token prompt is computed in chunks of {c['chunk']}; "
        f"{s['tokens_per_run']} tokens (the decode-only ways: their decode tokens) "
        f"a run, {c['rounds']} rounds, ways alternated; median (min-max).\n\n"
        + table(["way", "tokens/s"], rows)
        + f"\nOne fused pass on a unified cache / llmflow's passes, round by round: "
        f"**{med(s['fused_over_chunked'], 3)}**; the whole prompt in one pass of its own / chunks: "
        f"{med(s['whole_over_chunked'], 3)}; decode steps alone, unified / own streams: "
        f"{med(s.get('decode_only_unified_over_own'), 3)}.\n"
    )


def failed_and_resent(row: dict) -> str:
    """Failed requests, and those sent twice because the server dropped the first unanswered
    (results written before the bench resent such requests have no count)."""
    resent = row.get("resent", 0)
    return f"{row['failed']} ({resent} resent)" if resent else str(row["failed"])


def peers(d: Result) -> str:
    s, c = d["summary"], d["config"]
    header = ["workload", "server", "output tok/s", "TTFT p50 s", "TTFT p99 s", "ITL p50 ms", "ITL p99 ms",
              "TPOT p50 ms", "failed"]  # fmt: skip
    rows = []
    for workload, servers in s.items():
        for server, r in servers.items():
            rows.append(
                [
                    workload, server, med(r["output_tok_s"]),
                    med(r["ttft_p50_s"], 2), med(r["ttft_p99_s"], 2),
                    med(r["itl_p50_s"], 1, 1000), med(r["itl_p99_s"], 1, 1000), med(r["tpot_p50_s"], 1, 1000),
                    failed_and_resent(r),
                ]
            )  # fmt: skip
    fresh = ", new prompts in every round" if c.get("seeds") else ""
    intro = (
        f"{c['model']}, {threads(c['threads'])} for every server, {c['parallel']} batched sequences, "
        f"{c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy; "
        f"{plural(c['rounds'], 'round')}{fresh}, "
        "servers alternated per workload; median (min-max) over rounds.\n\n"
    )
    return intro + table(header, rows) + "\n" + peer_targets(s)


def peer_targets(s: Result) -> str:
    """llmflow against each peer per workload, medians: the goal is >= llama-server's tok/s and
    <= its TTFT p50, and more tok/s than either Python server."""
    lines = []
    for workload, servers in s.items():
        for name, ours in servers.items():
            if name == "llmflow" or name.startswith("llmflow "):
                lines.append(f"- {workload}: {name} " + "; ".join(_against_peers(ours, servers)))
    if not lines:
        return ""
    return (
        "llmflow (and each of its variants) against each peer (goals: against llama-server tok/s ratio "
        ">= 1 and TTFT p50 ratio <= 1; ahead of both Python servers), medians:\n\n" + "\n".join(lines) + "\n"
    )


def _against_peers(ours: Result, servers: Result) -> list[str]:
    theirs = servers.get("llama-server")
    parts = []
    if theirs:
        rate = ratio(ours["output_tok_s"], theirs["output_tok_s"])
        ttft = ratio(ours["ttft_p50_s"], theirs["ttft_p50_s"])
        met = "met" if rate is not None and ttft is not None and rate >= 1 and ttft <= 1 else "missed"
        parts.append(f"/ llama-server output tok/s {num(rate, 2)}, TTFT p50 {num(ttft, 2)}: {met}")
    for peer in ("example-server", "llama_cpp.server"):
        if servers.get(peer):
            rate = ratio(ours["output_tok_s"], servers[peer]["output_tok_s"])
            met = rate is not None and rate >= 1
            parts.append(f"/ {peer} tok/s {num(rate, 2)}: {'ahead' if met else 'behind'}")
    return parts


def ratio(a: dict | None, b: dict | None) -> float | None:
    return a["median"] / b["median"] if a and b and b["median"] else None


def cpu_steps(d: Result) -> str:
    s, c = d["summary"], d["config"]
    intro = (
        f"{c['model']}, {threads(c['threads'])}, {c['streams']} sequences of {c['prompt_tokens']} prompt "
        f"and {c['max_tokens']} generated tokens (every answer to the end), greedy; "
        f"{plural(c['rounds'], 'round')}, the two settings alternated; median (min-max) over rounds.\n\n"
    )
    rows = []
    for key, e in s.items():
        shares = " / ".join(
            med({k: v * 100 for k, v in e["wall_share"][kind].items() if k != "n"}, 0)
            for kind in ("full_decode", "with_prompt_tokens", "partial_decode")
        )
        rows.append([
            f"flash attention {key}",
            med(e["batched_bench_decode_tok_s"]),
            med(e["batched_bench_decode_step_ms"]),
            med(e["batched_bench_generated_tok_s"]),
            med(e["engine_full_step_ms"]),
            med(e["engine_forward_ms"]),
            med(e["engine_samplers_ms"], 2),
            med(e["engine_python_ms"], 2),
            med(e["engine_generated_tok_s"]),
            med(e["engine_over_batched_bench_generated"], 2),
            shares,
        ])  # fmt: skip
    header = ["setting", "batched-bench decode tok/s", "its decode step ms",
              "batched-bench generated tok/s (prefill + decode)", "engine full step ms", "forward pass ms",
              "samplers ms", "Python ms", "engine wave tok/s", "engine / batched-bench generated",
              "engine wave wall % full / prompt / narrower steps"]  # fmt: skip
    return intro + table(header, rows)


def spark(d: Result) -> str:
    s, c = d["summary"], d["config"]
    first = s["spark_first_job"]
    rows = [
        ["in-process `predict`", med(s["in_process_rows_per_s"], 2)],
        [f"Spark `{c['master']}`, first job (starts workers, loads engines)", num(first["rows_per_s"], 2)],
        [f"Spark `{c['master']}`, warm job", med(s["spark_warm_job_rows_per_s"], 2)],
        [
            "**warm Spark / in process, round by round**",
            f"**{med(s['spark_warm_over_in_process_rows_per_s'], 2)}**",
        ],
    ]
    return (
        f"{c['prompts']} prompts, {c['max_tokens']} tokens, {c['partitions']} partitions, "
        f"{c['rounds']} rounds "
        f"alternated; Spark session start {num(s['spark_session_start_s'], 1)} s; every answer equal to the "
        f"in-process one: {s['answers_equal']}.\n\n" + table(["job", "rows/s"], rows)
    )


def surface(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = []
    if "embeddings" in s:
        e = s["embeddings"]
        rows.append(
            [
                f"embeddings/s, a batch of {c['embedding_inputs']} short inputs",
                f"llmflow {med(e['llmflow_embeddings_per_s'])}",
                f"`Llama.embed` {med(e['llama_cpp_python_embeddings_per_s'])}",
                f"**{med(e['ratio_llmflow_over_llama_cpp_python'], 2)}**",
            ]
        )
    if "logprobs" in s:
        lp = s["logprobs"]
        rows.append(
            [
                "decode tok/s, logprobs (top 5) on / off",
                f"on {med(lp['on_tokens_per_s'])}",
                f"off {med(lp['off_tokens_per_s'])}",
                f"**{med(lp['ratio_on_over_off'], 3)}** (target >= 0.95)",
            ]
        )
    if "choices" in s:
        ch = s["choices"]
        rows.append([
            f"aggregate tok/s, n=4 against 4 requests ({ch['prompt_tokens']}-token prompt, batching engine)",
            f"n=4 {med(ch['n4_tokens_per_s'])}", f"4 requests {med(ch['separate4_tokens_per_s'])}",
            f"**{med(ch['ratio_n4_over_separate4'], 2)}** (target >= 1.3)",
        ])  # fmt: skip
    return (
        f"{c['model']}, {threads(c['threads'])}, {c['rounds']} rounds, sides alternated; "
        "median (min-max).\n\n" + table(["what", "one side", "other side", "ratio, round by round"], rows)
    )


def soak(d: Result) -> str:
    s = d["summary"]
    keys = [k for k, v in s.items() if isinstance(v, (int, float, bool, str)) and k != "samples"]
    return table(["check", "value"], [[f"`{k}`", str(s[k])] for k in keys])


def constraint_libraries(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = []
    for lib, r in s.items():
        rows.append(
            [
                f"`{lib}` {c['versions'].get(lib, '')}",
                f"{num(100 * r['compiled_share'], 0)}% ({r['timeouts']} timeouts)",
                med(r["compile_cold_ms"], 2),
                med(r["compile_cached_ms"], 3),
                med(r["mask_us_per_token"], 1),
                f"{num(100 * (r['walks_finished_share'] or 0), 0)}%",
                f"{num(100 * (r['valid_share_of_finished'] or 0), 0)}%",
            ]
        )
    header = ["library", "schemas compiled", "compile cold ms", "compile cached ms", "mask µs/token",
              "walks finished", "finished that validate"]  # fmt: skip
    return (
        f"{c['per_dataset']} schemas from each of {len(c['datasets'])} JSONSchemaBench datasets "
        f"({s[next(iter(s))]['schemas']} in all), the embedded model's vocabulary: {c['vocabulary']}; "
        f"{c['timeout_s']:g} s compile limit; a walk is up to {c['walk_tokens']} random tokens drawn "
        "from the mask; median (min-max) over the schemas.\n\n" + table(header, rows)
    )


def constraints(d: Result) -> str:
    s, c = d["summary"], d["config"]
    single, batched = s["llama_cpp"], s["llama_cpp_batched_8"]
    rows = [
        ["`llama_cpp`, 1 stream", med(single["unconstrained"]), med(single["constrained"]),
         f"**{med(s['llama_cpp_constrained_over_unconstrained'], 3)}**"],
        ["`llama_cpp`, llama.cpp's own GBNF sampler", med(single["unconstrained"]), med(single["gbnf"]),
         med(s["llama_cpp_gbnf_over_unconstrained"], 3)],
        ["`llama_cpp`, 1 stream, sampled (temperature 0.8)", med(single["unconstrained_sampled"]),
         med(single["constrained_sampled"]), med(s["llama_cpp_sampled_constrained_over_unconstrained"], 3)],
        [f"`llama_cpp_batched`, {c['streams']} streams", med(batched["unconstrained"]),
         med(batched["constrained"]),
         f"**{med(s['llama_cpp_batched_8_constrained_over_unconstrained'], 3)}**"],
    ]  # fmt: skip
    compiles = "; ".join(
        f"`{name}` cold {med(v['cold_ms'], 2)} ms, cached {med(v['cached_ms'], 4)} ms"
        for name, v in s["compile"].items()
    )
    return (
        f"{c['model']}, {c['max_tokens']} tokens, {plural(c['rounds'], 'round')} (sides alternated); "
        "decode tokens/s (one stream: first to last token; 8 streams: all tokens over the wall time), "
        "median (min-max); ratio round by round (target >= 0.95). One stream is greedy unless marked: "
        "a greedy step checks the top token and masks the logits only when the constraint refuses it; "
        "8 streams sample at temperature 0.8.\n\n"
        + table(["engine", "unconstrained tok/s", "constrained tok/s", "constrained / unconstrained"], rows)
        + f"\nSchema compile: {compiles}; llguidance's tokenizer for the model, built once: "
        f"{num(s['tokenizer_build_ms'], 0)} ms.\n"
    )


#: the GPU result the Ray Serve estimate scales from: llmflow serve, an 8B model, one H200
RAY_ESTIMATE_SOURCE = "llama_cpp_gpu_h200_run12.json"
RAY_TARGETS = {
    "serve-2t": "llmflow serve, 2 threads",
    "serve-1t": "llmflow serve, 1 thread",
    "ray-1x1t": "Ray Serve, 1 replica x 1 thread",
    "ray-2x1t": "Ray Serve, 2 replicas x 1 thread",
}


def ray(d: Result) -> str:
    s, c = d["summary"], d["config"]
    header = ["target", *(f"tok/s at {level}" for level in s["levels"]), "TTFT p50 ms at c=1"]
    rows = []
    for target, label in RAY_TARGETS.items():
        cells = [med(s["levels"][level][target]["output_tok_s"]) for level in s["levels"]]
        rows.append([label, *cells, med(s["levels"]["c=1"][target]["ttft_p50_s"], 0, 1000)])
    r = s["ratios"]
    ratio_rows = [
        ["1 stream, Ray 1x1t / serve 1 thread (the proxy's cost)",
         f"**{med(r['proxy_tok_s_ratio_1_stream'], 3)}** (target >= 0.95)"],
        ["1 stream, TTFT Ray 1x1t - serve 1 thread", f"{med(r['proxy_ttft_delta_s_1_stream'], 1, 1000)} ms"],
        ["1 stream, Ray 1x1t / serve 2 threads", med(r["ray_1x1t_over_serve_2t_1_stream"], 3)],
        *[[f"{level}, Ray 2x1t / serve 2 threads", med(r[f"ray_2x1t_over_serve_2t_{level}"], 2)]
          for level in s["levels"]],
    ]  # fmt: skip
    relay = s["relay_cpu_us_per_token"]
    intro = (
        f"{c['model']}, chat, {c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy, "
        f"`--parallel {c['parallel']}` everywhere; Ray {c['ray']}; {c['rounds']} rounds, targets rotated; "
        "output tok/s, median (min-max over rounds).\n\n"
    )
    cpu = (
        f"\nCPU that relaying one streamed token costs (this CPU): Ray's HTTP proxy "
        f"{med(relay['proxy'], 0)} µs, llmflow's ingress {med(relay['ingress'], 0)} µs.\n"
    )
    return (
        intro + table(header, rows) + "\n" + table(["ratio, round by round", "value"], ratio_rows) + cpu
        + ray_estimate(relay)
    )  # fmt: skip


def ray_estimate(relay: dict[str, dict | None]) -> str:
    """Replicas and machines for 100 and 10,000 concurrent streams of an 8B model on H200s, from
    the GPU run's largest measured concurrency and this run's relay cost."""
    path = REPO / "benchmarks" / "results" / RAY_ESTIMATE_SOURCE
    gpu = json.loads(path.read_text(encoding="utf-8"))
    levels = gpu["models"]["f16"]["servers"]["llmflow"]
    level = max(levels, key=int)
    streams_per_gpu, aggregate = int(level), levels[level]["output_tok_s"]
    per_stream = aggregate / streams_per_gpu
    relay_us = sum((relay[name] or {}).get("median", 0.0) for name in ("proxy", "ingress"))
    rows = []
    for streams in (100, 10_000):
        replicas = -(-streams // streams_per_gpu)
        relay_cores = streams * per_stream * relay_us / 1e6
        rows.append([f"{streams:,}", f"{replicas:,}", f"{-(-replicas // 8):,}", num(relay_cores, 1)])
    return (
        f"\n**Paper estimate** for an 8B model (f16) on H200s, one replica per GPU: the GPU run "
        f"(`benchmarks/results/{RAY_ESTIMATE_SOURCE}`) measured llmflow serve at {streams_per_gpu} "
        f"concurrent streams on one H200 at {num(aggregate, 0)} tok/s in all, {num(per_stream, 0)} tok/s a "
        f"stream; relaying costs {num(relay_us, 0)} µs of CPU a token (proxy + ingress, above). Streams "
        "beyond the measured concurrency are not assumed to fit on a GPU.\n\n"
        + table(
            ["concurrent streams", "replicas (H200s)", "8-GPU machines", "CPU cores for proxy + ingress"],
            rows,
        )
    )


def sessions(d: Result) -> str:
    s, c = d["summary"], d["config"]
    header = ["server", "TTFT turn 1 s", f"TTFT turns 2-{c['turns']} s", "short request TTFT s",
              f"{c['streams']} streams chunks/s"]  # fmt: skip
    rows = [
        [name, med(r["ttft_turn1_s"], 2), med(r["ttft_later_s"], 3), med(r["short_ttft_p50_s"], 3),
         med(r["streams_chunks_per_s"], 1)]
        for name, r in s["servers"].items()
    ]  # fmt: skip
    ratios = [
        [f"llmflow / {peer}", med(r["ttft_turn1"], 2), med(r["ttft_later"], 2), med(r["short_ttft"], 2),
         med(r["streams"], 2)]
        for peer, r in s["llmflow_over"].items()
    ]  # fmt: skip
    intro = (
        f"{c['model']}, {threads(c['threads'])} and {c['parallel']} sequences for every server, greedy. A "
        f"session: a system prompt of {c['system_words']} words (about 1.1k tokens), {c['turns']} turns of "
        f"{c['answer_tokens']}-token answers, each appended to the next request; a short request: a question "
        f"of its own, alone; {c['streams']} concurrent streams of {c['stream_tokens']} tokens. "
        f"{plural(c['rounds'], 'round')}, servers alternated, a new system prompt each round; median "
        "(min-max) over rounds; llmflow's ratios round by round: below 1 it is faster for a TTFT, "
        "above 1 for chunks/s (a chunk is about a token).\n\n"
    )
    if "revisits" not in s:
        return intro + table(header, rows + ratios)
    rv, rs, gi = s["revisits"], s["restart"], s["greedy_identity"]
    tiers = (
        f"\nThe conversation cache's tiers (llmflow): {c['sessions']} sessions on {c['parallel']} sequences, "
        f"each visited twice round robin with a {c['cache_ram_mib']} MiB host tier: a revisit's TTFT "
        f"{med(rv['cold_over_revisit'], 1)}x below its cold first turn, at least "
        f"{num(rv['reused_share_min'] * 100, 0)}% of every revisit's prompt reused (`cached_tokens`); the "
        f"server's RSS grew by {med(rv['rss_growth_over_budget'], 2)} of the budget (host tier at most "
        f"{num(rv['host_tier_bytes_max'] / 2**20, 0)} MiB). After a restart on the same "
        f"`--prompt-cache-dir`, a session's next turn: TTFT {med(rs['cold_over_after_restart'], 1)}x "
        "below its cold first turn "
        f"({med(rs['cached_share'], 2)} of its prompt reused). Greedy answers with the cache on and off, "
        f"the same sessions turn by turn ({gi['weights']}): {gi['identical']} of {gi['answers']} identical. "
        f"Saving a conversation to the host tier held the decode loop "
        f"{num(gi['saving']['save_ms_mean'], 1)} ms on average, {num(gi['saving']['save_ms_max'], 1)} ms at "
        f"most ({gi['saving']['saves']} saves).\n"
    )
    return intro + table(header, rows + ratios) + tiers


RENDERERS: dict[str, Callable[[Result], str]] = {
    "engine": engine, "flash_attn": flash_attn,
    "tracing": tracing, "mlflow_load": mlflow_load, "http": http, "server_cpu": server_cpu,
    "batching": batching, "step_shapes": step_shapes,
    "peers": peers, "peers_prefix": peers, "peers_chunk": peers, "peers_onepass": peers,
    "peers_fa": peers, "cpu_steps": cpu_steps, "serving_steps": serving_steps,
    "spark": spark, "surface": surface, "soak": soak, "load": soak,
    "constraint_libraries": constraint_libraries, "constraints": constraints, "ray": ray,
    "sessions": sessions,
}  # fmt: skip


def readme_batching(d: Result) -> str:
    parts = []
    for quant, q in d["summary"].items():
        parts.append(
            f"{quant}: {med(q.get('engine_8_over_1'), 2)}x on the batching engine, "
            f"{med(q.get('raw_8_over_1'), 2)}x for raw `llama_decode`"
        )
    return "8 streams against 1 (" + "; ".join(parts) + ")"


def readme_tracing(d: Result) -> str:
    return f"about {med(d['summary']['wrapper_us_per_chunk']['traced'], 1)} µs per chunk"


INLINE: dict[str, tuple[str, Callable[[Result], str]]] = {
    "readme-batching": ("batching", readme_batching),
    "readme-tracing": ("tracing", readme_tracing),
}


def section(name: str, results: Path) -> str:
    if name in INLINE:
        source, render = INLINE[name]
        document, path = load(results, source)
        if document is None:
            return f"(not measured yet: `python -m benchmarks run {source}`)"
        smoke = "; a smoke run on a busy machine, not to quote" if document["quick"] else ""
        return f"{render(document)} (`{path}`{smoke})"
    if name in GPU_PARTS:
        return gpu_section(name, results)
    if name not in RENDERERS:
        raise SystemExit(f"no renderer for the generated part {name!r}")
    document, path = load(results, name)
    if document is None:
        return missing(name)
    return RENDERERS[name](document) + "\n" + provenance(document, path)


def render_text(text: str, results: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        body = section(name, results)
        if name in INLINE:  # inline: no new lines of its own
            return f"{match.group(1).rstrip()}{body}{match.group(4)}"
        return f"{match.group(1)}{body}{match.group(4)}"

    return MARKER.sub(replace, text)


def render_all(results: Path, write: bool = True) -> list[str]:
    """Rewrite every generated part; return the documents that changed."""
    assert set(RENDERERS) <= set(BY_NAME)
    changed = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        new = render_text(text, results)
        if new != text:
            changed.append(path.name)
            if write:
                path.write_text(new, encoding="utf-8")
    return changed
