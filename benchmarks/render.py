"""Write the measured numbers into BENCHMARKS.md, README.md and docs/ from the stored results.

Each generated part sits between `<!-- BEGIN GENERATED: name -->` and `<!-- END GENERATED: name -->`
and is rewritten whole from `benchmarks/results/<file>.json` (the smoke run's
`results/quick/<file>.json` when there is no full one, marked as such); the prose around it is not
touched. Under every table: the result file, the command that wrote it, the commit and the machine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.record import paired_ratios, spread

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCUMENTS = (REPO / "BENCHMARKS.md", REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
MARKER = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) -->\n?)(.*?)(<!-- END GENERATED: \2 -->)", re.DOTALL)
Result = dict[str, Any]


# -- numbers ------------------------------------------------------------------------------------
def num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def med(s: dict | None, digits: int = 1, scale: float = 1.0) -> str:
    """A spread as `median (min-max)`; one value: just the value."""
    if not s:
        return "-"
    if s.get("n", 1) == 1 or s["min"] == s["max"]:
        return num(s["median"], digits, scale)
    return (
        f"{num(s['median'], digits, scale)} ({num(s['min'], digits, scale)}-{num(s['max'], digits, scale)})"
    )


def target(value: float | None, goal: float) -> str:
    if value is None:
        return "-"
    return f"{num(value, 2)} (target ≥ {goal}: {'met' if value >= goal else 'missed'})"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


# -- one renderer per result format ---------------------------------------------------------------
def engine(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [["llmflow `LLM.stream`", med(s["llmflow_tokens_per_s"]), med(s["llmflow_ttft_ms"])],
            ["raw llama-cpp-python", med(s["raw_tokens_per_s"]), med(s["raw_ttft_ms"])],
            ["**llmflow / raw, round by round**", f"**{med(s['tokens_per_s_ratio'], 3)}** (target >= 0.98)",
             f"**{med(s['ttft_delta_ms'], 1)} ms** (target <= +5 ms)"]]  # fmt: skip
    return (
        f"{c['model']}, {plural(c['threads'], 'thread')}, {c['max_tokens']} tokens, greedy, {c['runs']} "
        "alternated runs from an empty KV cache; median (min-max).\n\n"
        + table(["path", "decode tok/s", "TTFT ms"], rows)
    )


def tracing(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [[m, med(s[f"{m}_tokens_per_s"]), med(s[f"{m}_ttft_ms"])] for m in ("off", "on", "timings")]
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
    rows = [[f"in process, {kind}", med(v, 3), "-", "-", "-"] for kind, v in s["in_process_s"].items()]
    rows += [[f"fresh process, {kind}", *(med(p[part], 3) for part in ("load_s", "import_s", "first_chunk_s",
              "process_s"))] for kind, p in s["fresh_process_s"].items()]  # fmt: skip
    return (
        f"{c['model']}; {c['runs']} in-process loads and {c['processes']} fresh processes per kind, kinds "
        f"alternated; seconds, median (min-max). Target: in process <= 1 s. `log_model` "
        f"{num(s['log_model_s'], 3)} s, `save_model` {num(s['save_model_s'], 3)} s.\n\n"
        + table(["load", "load", "imports", "first chunk", "whole process"], rows)
    )


def http(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [[f"`{way}`", med(v["decode_tok_s"]), med(v["ttft_ms"]), med(v["cpu_us_per_chunk"], 0)]
            for way, v in s["spread"].items()]  # fmt: skip
    header = "ratio, round by round (targets: HTTP/in-process >= 0.97, TTFT overhead <= 10 ms)"
    return (
        f"{c['model']}, {plural(c['threads'], 'thread')}, {c['max_tokens']} tokens, {c['runs']} alternated "
        "rounds; median (min-max).\n\n"
        + table(["way", "decode tok/s", "TTFT ms", "this process's CPU µs/chunk"], rows)
        + "\n"
        + table([header, "value"], [[name, med(value, 3)] for name, value in s["ratios"].items()])
    )


def batching(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [[quant, med(q["engine"]["1"]["output_tok_s"]), med(q["engine"]["8"]["output_tok_s"]),
             f"**{med(q['engine_8_over_1'], 2)}**"] for quant, q in s.items()]  # fmt: skip
    return (
        f"{c['model']} and its requantizations, {plural(c['threads'], 'thread')}, {c['prompt_tokens']}-token "
        f"prompts, {c['max_tokens']} tokens, {plural(c['rounds'], 'round')} (weight types and levels "
        "alternated); output tokens/s, median (min-max); the ratio round by round.\n\n"
        + table(["weights", "1 stream", "8 streams", "8 / 1"], rows)
    )


def constraints(d: Result) -> str:
    s, c = d["summary"], d["config"]
    one, eight = s["llama_cpp"], s["llama_cpp_batched_8"]
    rows = [
        ["`llama_cpp`, 1 stream", med(one["unconstrained"]), med(one["constrained"]),
         f"**{med(s['llama_cpp_constrained_over_unconstrained'], 3)}**"],
        ["`llama_cpp`, llama.cpp's own GBNF sampler", med(one["unconstrained"]), med(one["gbnf"]),
         med(s["llama_cpp_gbnf_over_unconstrained"], 3)],
        ["`llama_cpp`, 1 stream, sampled (temperature 0.8)", med(one["unconstrained_sampled"]),
         med(one["constrained_sampled"]), med(s["llama_cpp_sampled_constrained_over_unconstrained"], 3)],
        [f"`llama_cpp_batched`, {c['streams']} streams", med(eight["unconstrained"]),
         med(eight["constrained"]), f"**{med(s['llama_cpp_batched_8_constrained_over_unconstrained'], 3)}**"],
    ]  # fmt: skip
    compiles = "; ".join(f"`{name}` cold {med(v['cold_ms'], 2)} ms, cached {med(v['cached_ms'], 4)} ms"
                         for name, v in s["compile"].items())  # fmt: skip
    return (
        f"{c['model']}, {c['max_tokens']} tokens, {plural(c['rounds'], 'round')} (sides alternated); decode "
        "tokens/s, median (min-max); ratio round by round (target >= 0.95). One stream is greedy unless "
        "marked; 8 streams sample at temperature 0.8.\n\n"
        + table(["engine", "unconstrained tok/s", "constrained tok/s", "constrained / unconstrained"], rows)
        + f"\nSchema compile: {compiles}.\n"
    )


def speculation(d: Result) -> str:
    """On and off per workload; the draft tokens confirmed, where the result counted them."""
    s, c = d["summary"], d["config"]
    labels = {"rewrite": ("`llama_cpp`, rewrite a ~600-token text changing one word", 1.5),
              "chat": ("`llama_cpp`, ordinary chat prompts", 0.97),
              "batched_8": (f"`llama_cpp_batched`, {c['streams']} rewrite streams at once", 1.3)}  # fmt: skip
    rows = []
    for key, (label, goal) in labels.items():
        w, drafts = s[key], s[key].get("draft_tokens")
        rows.append([label, med(w["off"]), med(w["on"]), f"**{med(w['on_over_off'], 2)}**", f">= {goal}",
                     f"{w['identical']} of {w['answers']}",
                     f"{drafts['accepted']} of {drafts['proposed']}" if drafts else "-"])  # fmt: skip
    header = ["workload", "off tok/s", "on tok/s", "on / off", "target", "same answer",
              "draft tokens confirmed of verified"]  # fmt: skip
    return (
        f"{c['model']}, greedy, {c['max_tokens']} tokens at most, KV cache "
        f"{c['engine_options'].get('kv_cache_type', 'f16')}, {plural(c['rounds'], 'round')} (sides "
        "alternated); decode tokens/s, median (min-max); the ratio round by round.\n\n" + table(header, rows)
    )


def speculation_servers(d: Result) -> str:
    """llmflow's prompt lookup beside llama-server's n-gram speculation, served, one stream."""
    s, c = d["summary"], d["config"]
    ratios, same, peers_ = s["on_over_off"], s["identical_to_off"], s["llmflow_on_over_llama_server"]
    rows = [[f"`{name}`", med(rate), med(ratios[name], 2) if name in ratios else "-",
             f"{same[name]['same']} of {same[name]['answers']}" if name in same else "-"]
            for name, rate in s["decode_tok_s"].items()]  # fmt: skip
    beside = ", ".join(f"`{name}` {med(ratio, 2)}" for name, ratio in peers_.items())
    return (
        f"{c['model']}, greedy rewrites of {c['max_tokens']} tokens at most, one request at a time, "
        f"llmflow's `draft_max` {c['draft_max']}, {plural(c['rounds'], 'round')} of {len(c['rewrites'])} "
        "prompts (sides rotated); decode tokens/s, median (min-max) of the rounds' medians; on / off "
        "round by round, against the same server without speculation.\n\n"
        + table(["side", "decode tok/s", "on / off", "same answer as off"], rows)
        + f"\n`llmflow on` over each llama-server side, round by round: {beside}.\n"
    )


def lora(d: Result) -> str:
    s, c = d["summary"], d["config"]
    rows = [["no adapter", med(s["base_tok_s"])], ["all requests on adapter a", med(s["one_tok_s"])],
            ["half on a, half on b (they alternate)", med(s["two_tok_s"])],
            ["**two adapters / one, round by round**", f"**{med(s['tok_s_ratio_two_one'], 2)}**"],
            ["one adapter / none, round by round", med(s["tok_s_ratio_one_base"], 2)]]  # fmt: skip
    return (
        f"{c['model']} on `{c['engine']}`, {c['streams']} concurrent greedy requests of {c['max_tokens']} "
        f"tokens, {plural(c['rounds'], 'round')} (modes rotated); output tok/s, median (min-max).\n\n"
        + table(["requests", "output tok/s"], rows)
    )


def peers(d: Result) -> str:
    """Every server at every workload; beside each peer, llmflow's tok/s and TTFT p50 over its (medians)."""
    s, c = d["summary"], d["config"]

    def over(ours: Result, it: Result, key: str) -> str:
        a, b = ours[key], it[key]
        return num(a["median"] / b["median"], 2) if a and b and b["median"] else "-"

    rows = []
    for workload, servers in s.items():
        ours = servers.get("llmflow")
        for server, r in servers.items():
            failed = f"{r['failed']} ({r['resent']} resent)" if r.get("resent") else str(r["failed"])
            versus = "" if server.startswith("llmflow") or not ours else (
                f"{over(ours, r, 'output_tok_s')} / {over(ours, r, 'ttft_p50_s')}")  # fmt: skip
            rows.append([workload, server, med(r["output_tok_s"]), med(r["ttft_p50_s"], 2),
                         med(r["itl_p50_s"], 1, 1000), med(r["itl_p99_s"], 1, 1000), failed,
                         versus])  # fmt: skip
    header = ["workload", "server", "output tok/s", "TTFT p50 s", "ITL p50 ms", "ITL p99 ms", "failed",
              "llmflow / it: tok/s / TTFT p50"]  # fmt: skip
    return (
        f"{c['model']}, {plural(c['threads'], 'thread')} for every server, {c['parallel']} batched "
        f"sequences, {c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy; "
        f"{plural(c['rounds'], 'round')}{', new prompts in every round' if c.get('seeds') else ''}, "
        "servers alternated per workload; median (min-max) over rounds.\n\n" + table(header, rows)
    )


def sessions(d: Result) -> str:
    s, c = d["summary"], d["config"]
    header = ["server", "TTFT turn 1 s", f"TTFT turns 2-{c['turns']} s", "short request TTFT s",
              f"{c['streams']} streams chunks/s"]  # fmt: skip
    rows = [[name, med(r["ttft_turn1_s"], 2), med(r["ttft_later_s"], 3), med(r["short_ttft_p50_s"], 3),
             med(r["streams_chunks_per_s"], 1)] for name, r in s["servers"].items()]  # fmt: skip
    rows += [[f"llmflow / {peer}", med(r["ttft_turn1"], 2), med(r["ttft_later"], 2), med(r["short_ttft"], 2),
              med(r["streams"], 2)] for peer, r in s["llmflow_over"].items()]  # fmt: skip

    def one_by_one(key: str, unit: str) -> str:
        return "; ".join(f"llmflow / {p} {med(r[key], 2)} over {r[key]['n']} {unit}"
                         for p, r in s["llmflow_over"].items() if r.get(key))  # fmt: skip

    turns, requests = one_by_one("ttft_later_turns", "turns"), one_by_one("short_requests", "requests")
    alike = "the short requests, then the sessions" if requests else "the sessions"
    apart = f", {c['pause_ms']} ms apart" if c.get("pause_ms") else ""
    together = f" ({alike}: every server up at once, each request sent to one after another{apart})"
    together *= bool(turns)
    text = (
        f"{c['model']}, {plural(c['threads'], 'thread')} and {c['parallel']} sequences for every server, "
        f"greedy. A session: a system prompt of {c['system_words']} words, {c['turns']} turns of "
        f"{c['answer_tokens']}-token answers, each appended to the next request; a short request: a question "
        f"of its own, alone; {c['streams']} concurrent streams of {c['stream_tokens']} tokens. "
        f"{plural(c['rounds'], 'round')}, servers alternated{together}, a new system prompt each round; "
        "median (min-max); llmflow's ratios round by round: below 1 it is faster for a TTFT, above 1 for "
        "chunks/s (a chunk is about a token).\n\n" + table(header, rows)
    )
    if turns:
        text += f"\nThe later turns' TTFT, turn by turn: {turns}."
        text += f" A short request's TTFT, request by request: {requests}.\n" if requests else "\n"
    if "revisits" not in s:  # a run of the servers only (`--peers-only`)
        return text
    rv, rs, gi = s["revisits"], s["restart"], s["greedy_identity"]
    return text + (
        f"\nThe conversation cache's tiers (llmflow): {c['sessions']} sessions on {c['parallel']} sequences, "
        f"each visited twice round robin with a {c['cache_ram_mib']} MiB host tier: a revisit's TTFT "
        f"{med(rv['cold_over_revisit'], 1)}x below its cold first turn, at least "
        f"{num(rv['reused_share_min'] * 100, 0)}% of every revisit's prompt reused (`cached_tokens`); the "
        f"server's RSS grew by {med(rv['rss_growth_over_budget'], 2)} of the budget (host tier at most "
        f"{num(rv['host_tier_bytes_max'] / 2**20, 0)} MiB). After a restart on the same "
        f"`--prompt-cache-dir`, a session's next turn: TTFT {med(rs['cold_over_after_restart'], 1)}x "
        f"below its cold first turn ({med(rs['cached_share'], 2)} of its prompt reused). Greedy answers with "
        f"the cache on and off, the same sessions turn by turn: {gi['identical']} of {gi['answers']} "
        f"identical. Saving a conversation to the host tier held the decode loop "
        f"{num(gi['saving']['save_ms_mean'], 1)} ms on average, {num(gi['saving']['save_ms_max'], 1)} ms at "
        f"most ({gi['saving']['saves']} saves).\n"
    )


def images(d: Result) -> str:
    s, c = d["summary"], d["config"]
    header = ["server", "TTFT text s", "TTFT new image s", "TTFT same image, new chat s",
              "new image less text s", "new less same image s"]  # fmt: skip
    keys = ("text_ttft_s", "cold_ttft_s", "same_ttft_s", "image_cost_s", "reuse_saves_s")
    rows = [[name, *(med(r[key], 3) for key in keys)] for name, r in s["servers"].items()]
    ratios, peer = s["llmflow_over_llama_server"], s["servers"].get("llama-server", {})
    chunks = s["servers"].get("llmflow", {}).get("image_chunks")
    timings = (
        f"; llama-server's own prompt time: text {med(peer['text_prompt_ms'], 0)} ms, new image "
        f"{med(peer['cold_prompt_ms'], 0)} ms, same image {med(peer['same_prompt_ms'], 0)} ms"
        if "cold_prompt_ms" in peer
        else ""
    )
    reused = f" (llmflow took {num(chunks['reused'], 0)} of them from its encoded images)" if chunks else ""
    return table(header, rows) + (
        f"\n{c['model']} with {c['mmproj']} ({c.get('shape', 'given')} shape, random weights), "
        f"{c['image']} images, {plural(c['threads'], 'thread')}, {c['rounds']} rounds of {c['requests']} "
        f"requests of each kind, servers alternated; median (min-max). Each request a conversation of "
        f"its own; a same-image request resends a new image's bytes{reused}. llmflow / llama-server "
        f"TTFT round by round: text {med(ratios.get('text_ttft'), 2)}, new image "
        f"{med(ratios.get('cold_ttft'), 2)}, same image {med(ratios.get('same_ttft'), 2)}{timings}."
    )


def checks(d: Result) -> str:
    """The soak's and the load test's checks: every value a plain figure or a yes/no."""
    figures = [f"`{k}` {v}" for k, v in d["summary"].items() if isinstance(v, (int, float, bool))]
    return "; ".join(figures) + ".\n"


# -- GPU results (benchmarks/gpu/bench_llama_cpp_gpu.py) -------------------------------------------
def server_cell(row: Result | None) -> str:
    if row is None:
        return "-"
    low, high = row["output_tok_s_min_max"]
    summary = row["summary_of_median_round"]
    if summary["failed"]:
        total = summary["completed"] + summary["failed"]
        return f"{num(row['output_tok_s'])} ({summary['completed']} of {total} requests completed)"
    timing = f"{num(row['ttft_p50_s'], 0, 1000)} / {num(row['itl_p50_s'], 1, 1000)}"
    return f"{num(row['output_tok_s'])} [{num(low, 0)}-{num(high, 0)}] ({timing})"


def gpu_servers(d: Result) -> str:
    """A row per model and concurrency: llmflow serve, its variants (each over it, round by round),
    every llama-server run (llmflow over it, against the targets), llama-batched-bench's decode;
    under it, the top concurrency against the ceilings (`gpu_ceilings`) or the engine in process."""
    names = list(next(iter(d["models"].values()))["servers"])
    variants = [n for n in names if n.startswith("llmflow ")]
    peers_ = [n for n in names if not n.startswith("llmflow")]
    ceiling = any("batched_bench" in entry for entry in d["models"].values())
    header = ["model", "streams", "`llmflow`"]
    header += [cell for n in variants for cell in (f"`{n}`", "/ `llmflow`, round by round")]
    header += [cell for n in peers_ for cell in (f"`{n}`", f"`llmflow` / `{n}`")]
    header += ["llama-batched-bench decode", "`llmflow` / batched-bench"] if ceiling else []
    rows = []
    for label, entry in d["models"].items():
        servers = entry["servers"]
        decode = entry.get("batched_bench", {}).get("streams", {}).get("decode_tok_s")
        for level, ours in servers["llmflow"].items():
            cells = [label, level, server_cell(ours)]
            for name in variants:
                theirs = servers[name][level]
                rounds = paired_ratios(theirs["output_tok_s_rounds"], ours["output_tok_s_rounds"])
                cells += [server_cell(theirs), med(rounds, 3)]
            for name in peers_:
                other = servers[name].get(level)
                rate = ours["output_tok_s"] / other["output_tok_s"] if other else None
                cells += [server_cell(other), target(rate, 0.97 if level == "1" else 1.0)]
            if ceiling:
                rate = ours["output_tok_s"] / decode[level]
                cells += [num(decode[level]), target(rate, 0.9) if level == "64" else num(rate, 2)]
            rows.append(cells)
    c = d["config"]
    return (
        f"Output tokens/s of each server's median round of {c['rounds']} [min-max over rounds] (TTFT p50 / "
        f"ITL p50 in ms); {c['prompt_tokens']}-token prompts, {c['max_tokens']} tokens, greedy.\n\n"
        + table(header, rows)
        + (gpu_ceilings(d) if ceiling else serving_factors(d))
    )


def gpu_ceilings(d: Result) -> str:
    """At the top concurrency: llama-batched-bench counted over its prefill and decode (the ceiling
    for a workload that brings its prompts), the engine in this process (no HTTP), and one KV pool."""
    rows = []
    for label, entry in d["models"].items():
        bench, inside = entry.get("batched_bench"), entry.get("in_process", entry.get("step_split"))
        if not bench or not inside:
            continue
        top = max(entry["servers"]["llmflow"], key=int)
        served = entry["servers"]["llmflow"][top]["output_tok_s"]
        whole = next(r for r in bench["streams"]["rows"] if r["pl"] == int(top))
        whole_rate = whole["pl"] * whole["tg"] / (whole["t_pp"] + whole["t_tg"])
        decode = [num(bench[pool]["decode_tok_s"][top]) for pool in ("streams", "unified")]
        inside_rate = inside["generated_tok_s"]
        rows.append([label, *decode, num(whole_rate), num(served / whole_rate, 2), num(inside_rate),
                     f"**{num(served / inside_rate, 2)}**"])  # fmt: skip
    if not rows:
        return ""
    header = ["model", "batched-bench decode tok/s", "the same, one KV pool (`-kvu`)",
              "batched-bench tok/s over prefill + decode", "`llmflow` / that", "engine in process tok/s",
              "serving factor: `llmflow` / in process"]  # fmt: skip
    return (
        f"\nAt {top} streams: llama-batched-bench's decode with a KV stream per sequence and with one "
        "pool, its generated tokens over prefill and decode together, and one wave of the same "
        "generations on the engine in this process (no HTTP):\n\n" + table(header, rows)
    )


def serving_factors(d: Result) -> str:
    """At the top concurrency, without llama-batched-bench: each llmflow server's output tok/s over
    the same `llmflow bench` workload on the engine in this process, in the same rounds."""
    rows = []
    for label, entry in d["models"].items():
        inside = entry["in_process_bench"]["output_tok_s_rounds"]
        top = max(entry["servers"]["llmflow"], key=int)
        for name in (n for n in entry["servers"] if n.startswith("llmflow")):
            served = entry["servers"][name][top]["output_tok_s_rounds"]
            rows.append([label, f"`{name}`", med(spread(served)), med(spread(inside)),
                         f"**{med(paired_ratios(served, inside), 2)}**"])  # fmt: skip
    header = ["model", "server", "output tok/s", "the same workload in process, tok/s",
              "serving factor: server / in process, round by round"]  # fmt: skip
    return (
        f"\nAt {top} streams, against the same `llmflow bench` workload (the same requests, the same "
        "closed loop) on the engine in the benchmark's own process (no HTTP), in the same rounds; "
        "median (min-max) of the rounds:\n\n" + table(header, rows)
    )


# -- short figures inside a sentence --------------------------------------------------------------
def readme_gpu(d: Result) -> str:
    """llmflow serve over llama-server at the top concurrency, per model."""
    ratios = []
    for label, entry in d["models"].items():
        ours, theirs = entry["servers"]["llmflow"], entry["servers"]["llama-server"]
        top = max(ours, key=int)
        rate = ours[top]["output_tok_s"] / theirs[top]["output_tok_s"]
        ratios.append(f"{label} {num(rate, 2)}x at {top} streams")
    return ", ".join(ratios)


def readme_images(d: Result) -> str:
    figures = [f"{name}: new image {med(r['cold_ttft_s'], 2)} s, same image again {med(r['same_ttft_s'], 2)}"
               " s" for name, r in d["summary"]["servers"].items()]  # fmt: skip
    return "; ".join(figures) + " (CPU)"


# -- the parts of the documents -------------------------------------------------------------------
@dataclass(frozen=True)
class Part:
    file: str  # the result file's stem
    render: Callable[[Result], str]
    rerun: str = ""  # the command that writes it again, where it is not `python -m benchmarks run FILE`
    inline: bool = False  # inside a sentence: no lines of its own, the file named after it


GPU_RUN = "on the GPU machine, `benchmarks/gpu/run_h200.sh {}`"
GPU_COMMAND = "the same command on the GPU machine, after `run_h200.sh build`"
XEON = "`python -m benchmarks run speculation`, on an Intel Xeon with AVX-512"
PARTS: dict[str, Part] = {
    **{name: Part(name, render) for name, render in {
        "engine": engine, "tracing": tracing, "mlflow_load": mlflow_load, "http": http, "batching": batching,
        "constraints": constraints, "peers": peers, "speculation": speculation, "lora": lora,
        "sessions": sessions, "soak": checks, "load": checks, "images": images,
    }.items()},
    "gpu-images": Part("images_gpu", images, GPU_RUN.format("images")),
    "gpu-sessions": Part("sessions_h200", sessions, GPU_RUN.format("sessions")),
    "gpu-llama-cpp": Part("llama_cpp_gpu_h200_run12", gpu_servers, GPU_RUN.format("bench")),
    "gpu-llama-cpp-switch": Part("llama_cpp_gpu_serving64", gpu_servers, GPU_RUN.format("measure")),
    "gpu-speculation": Part("speculation_gpu", speculation_servers, GPU_RUN.format("speculation")),
    "gpu-speculation-real": Part("speculation_gpu_smollm2", speculation_servers, GPU_COMMAND),
    "gpu-speculation-inprocess": Part("speculation_gpu_inprocess", speculation, GPU_COMMAND),
    "speculation-xeon": Part("speculation_xeon", speculation, XEON),
    "readme-batching": Part("batching", lambda d: "8 streams against 1: " + ", ".join(
        f"{quant} {med(q['engine_8_over_1'], 2)}x" for quant, q in d["summary"].items()), inline=True),
    "readme-tracing": Part("tracing", lambda d: "about " + med(d["summary"]["wrapper_us_per_chunk"]["traced"])
                           + " µs per chunk", inline=True),
    "readme-engine": Part("engine", lambda d: med(d["summary"]["tokens_per_s_ratio"], 2), inline=True),
    "readme-http": Part("http", lambda d: med(d["summary"]["ratios"]["http_over_in_process_tok_s"], 2),
                        inline=True),
    "readme-gpu": Part("llama_cpp_gpu_h200_run12", readme_gpu, GPU_RUN.format("bench"), inline=True),
    "sessions-identity": Part("sessions", lambda d: "{identical} of {answers} greedy answers identical with "
                              "the cache on and off".format(**d["summary"]["greedy_identity"]), inline=True),
    "readme-images": Part("images", readme_images, inline=True),
}  # fmt: skip


def load(results: Path, name: str) -> tuple[Result | None, str]:
    """A result and its path as the documents show it (a smoke run's when there is no full one)."""
    for path in (results / f"{name}.json", results / "quick" / f"{name}.json"):
        if path.is_file():
            shown = f"benchmarks/results/{path.relative_to(results).as_posix()}"
            return json.loads(path.read_text(encoding="utf-8")), shown
    return None, f"benchmarks/results/{name}.json"


def provenance(d: Result, path: str, part: Part) -> str:
    """The line under every table: where the numbers come from, and how busy the machine was."""
    commit = d["commit"] if isinstance(d["commit"], dict) else {"sha": d["commit"]}  # the GPU script's
    sha = re.sub(r"^([0-9a-f]{10})[0-9a-f]{30}$", r"\1", commit.get("sha") or "unknown")  # a full sha, short
    sha += " + changes" if commit.get("dirty") else ""
    m, quick = d["machine"], d.get("quick")
    if "cpu_model" in m:
        where = f"{m['gpu']}; " if m.get("gpu") else ""
        where += f"{m['cpu_model']}, {m['usable_cores']} usable cores"
        if m.get("load_1m_start") is not None:
            where += f"; 1-minute load average {num(m['load_1m_start'], 2)} → {num(m.get('load_1m_end'), 2)}"
    else:  # the GPU script's own machine record
        where = f"{m['gpu'].split(',')[0]}, {m['cpus']} CPU cores"
    rerun = part.rerun or f"`python -m benchmarks run {Path(path).stem}{' --quick' if quick else ''}`"
    when = f" on {d['started_at'][:10]}" if "started_at" in d else ""
    line = f"Result `{path}`, written by `{d['command']}` (re-run: {rerun}) at commit `{sha}`{when}; {where}."
    if quick:
        line = "**Smoke run (`--quick`): few rounds, short answers; not a measurement to quote.** " + line
    return line + "".join(f" {note}." for note in d.get("notes", [])) + "\n"


def section(name: str, results: Path = RESULTS) -> str:
    if name not in PARTS:
        raise SystemExit(f"no renderer for the generated part {name!r}")
    part = PARTS[name]
    d, path = load(results, part.file)
    if d is None:
        how = part.rerun or f"`python -m benchmarks run {part.file}`"
        return f"(not measured yet: {how})" if part.inline else f"No result yet: {how} writes `{path}`.\n"
    if part.inline:
        return f"{part.render(d)} (`{path}`{'; a smoke run, not to quote' if d.get('quick') else ''})"
    return part.render(d) + "\n" + provenance(d, path, part)


def render_text(text: str, results: Path = RESULTS) -> str:
    def replace(match: re.Match[str]) -> str:
        begin, name, _, end = match.groups()
        inline = name in PARTS and PARTS[name].inline  # the marker then stays on the sentence's line
        return f"{begin.rstrip() if inline else begin}{section(name, results)}{end}"

    return MARKER.sub(replace, text)


def render_all(results: Path = RESULTS, write: bool = True) -> list[str]:
    """Rewrite every generated part; return the documents that changed."""
    changed = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        new = render_text(text, results)
        if new != text:
            changed.append(path.relative_to(REPO).as_posix())
            if write:
                path.write_text(new, encoding="utf-8")
    return changed
