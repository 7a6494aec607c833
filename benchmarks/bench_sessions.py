"""Multi-turn sessions against the peers, and the conversation cache's tiers.

On the same GGUF, threads and sequences: `short` (a short request alone) and `sessions` (a long
system prompt, several turns, each answer appended), every server just started and up at once, each
request and turn sent to one server after another; then, servers alternated, `streams`; llmflow
alone: `revisits` (more sessions than sequences, round robin, on the host tier) and `restart` (the
next turn after a restart on the same `--prompt-cache-dir`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from benchmarks.peers.compare_servers import Setup, add_peer_arguments, serve
from benchmarks.record import Recording, config_of, paired_ratios, rotated, spread
from benchmarks.serve_process import CLIENT, metric, model_id, stream_chat
from benchmarks.stream_timing import at_once
from benchmarks.suite import parser
from llmflow.model_files import default_model_path

WORDS = ("policy", "customer", "order", "refund", "shipping", "invoice", "account", "warranty", "return",
         "exchange", "store", "product", "delivery", "payment", "support", "ticket", "escalation", "manager",
         "discount", "coupon", "loyalty")  # fmt: skip
FIRST_QUESTION = "Hello, which rule comes first?"


def system_prompt(seed: int, words: int) -> str:
    """A long instruction text of its own per seed: no server answers it from an earlier round's cache."""
    picked = [WORDS[(seed * 7 + i * 13 + i * i) % len(WORDS)] for i in range(words)]
    lines = [" ".join(picked[i : i + 12]) + "." for i in range(0, words, 12)]
    return f"You are support assistant #{seed}. Follow these rules:\n" + "\n".join(lines)


def sessions(urls: dict[str, str], seed: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The same session on every server at once, turn by turn (the first server rotating; a pause
    before each turn, so that no server's idle work falls into another's): each ratio compares the
    machine at one moment (one session per server and round moved a ratio 10-20%)."""
    models = {name: model_id(url) for name, url in urls.items()}
    chats = {name: [{"role": "system", "content": system_prompt(seed, args.system_words)}] for name in urls}
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in urls}
    for turn in range(args.turns):
        question = f"Customer question {turn + 1}: what does rule {turn} mean?"
        for name in rotated(list(urls), turn):
            time.sleep(args.pause_ms / 1000)
            chats[name].append({"role": "user", "content": question})
            answer = stream_chat(urls[name], models[name], chats[name], args.answer_tokens)
            turns[name].append({k: answer[k] for k in ("ttft_s", "e2e_s", "chunks", "usage", "timings")})
            chats[name].append({"role": "assistant", "content": answer["text"]})
    later = {name: [x["ttft_s"] for x in t[1:]] for name, t in turns.items()}
    return {name: {"turns": t, "ttft_turn1_s": t[0]["ttft_s"], "later_ttft_s": later[name],
                   "ttft_later_s": statistics.median(x for x in later[name] if x is not None)}
            for name, t in turns.items()}  # fmt: skip


def short_requests(urls: dict[str, str], seed: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """A short request alone, the same question on every server in turn: paired, as the turns are."""
    models, ttfts = {name: model_id(url) for name, url in urls.items()}, {name: [] for name in urls}
    for i in range(args.short_requests):
        word = WORDS[(seed + i) % len(WORDS)]
        question = f"Request {seed}-{i}: in one sentence, why do {word}s matter to a shop?"
        for name in rotated(list(urls), i):
            time.sleep(args.pause_ms / 1000)
            ttfts[name].append(stream_chat(urls[name], models[name], question, 8)["ttft_s"])
    return {name: {"ttft_s": t, "ttft_p50_s": statistics.median(x for x in t if x is not None)}
            for name, t in ttfts.items()}  # fmt: skip


def concurrent_streams(url: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    model, tokens = model_id(url), args.stream_tokens
    prompts = [f"Stream {seed}-{i}. Count from 1 to 300, separated by commas:" for i in range(args.streams)]
    elapsed, results = at_once(args.streams, lambda i: stream_chat(url, model, prompts[i], tokens))
    chunks = sum(r["chunks"] for r in results)
    return {"chunks": chunks, "elapsed_s": elapsed, "chunks_per_s": chunks / elapsed}


def rss_bytes(url: str) -> int | None:
    """The resident memory of the process serving `url` (found by the port on its command line)."""
    port = url.removesuffix("/v1").rsplit(":", 1)[1]
    for process in psutil.process_iter(["cmdline", "memory_info"]):
        command = process.info["cmdline"] or []
        if "--port" in command[:-1] and command[command.index("--port") + 1] == port:
            return process.info["memory_info"].rss
    return None


def revisits(setup: Setup, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """`args.sessions` sessions on `setup.parallel` sequences, round robin, with the host tier."""
    with serve(setup, "llmflow", "llmflow-revisits", prompt_cache_ram_mib=args.cache_ram_mib) as url:
        model, conversations, cold, rss_start = model_id(url), [], [], rss_bytes(url)
        for s in range(args.sessions):
            system = system_prompt(seed * 1000 + s, args.revisit_system_words)
            messages = [{"role": "system", "content": system}, {"role": "user", "content": FIRST_QUESTION}]
            answer = stream_chat(url, model, messages, 16)
            cold.append(answer["ttft_s"])
            conversations.append([*messages, {"role": "assistant", "content": answer["text"]}])
        warm, reused = [], []
        for messages in conversations:
            messages.append({"role": "user", "content": "And the second one?"})
            answer = stream_chat(url, model, messages, 16)
            warm.append(answer["ttft_s"])
            reused.append(reused_share(answer["usage"]))
        rss_end = rss_bytes(url)
        metrics = CLIENT.get(url.removesuffix("/v1") + "/metrics", timeout=30).text
    host_bytes = metric(metrics, "llmflow_prompt_cache_bytes", tier="host")
    return {"cold_ttft_s": cold, "revisit_ttft_s": warm, "reused_share": reused, "rss_start": rss_start,
            "cold_over_revisit": statistics.median(cold) / statistics.median(warm), "rss_end": rss_end,
            "reused_share_min": min(reused), "host_tier_bytes": host_bytes,
            "budget_bytes": args.cache_ram_mib << 20}  # fmt: skip


def restart(setup: Setup, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """A session's first turn, a restart on the same cache directory, its second turn."""
    with tempfile.TemporaryDirectory() as cache_dir:
        system = system_prompt(seed * 7919, args.system_words)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": FIRST_QUESTION}]
        with serve(setup, "llmflow", "llmflow-before-restart", prompt_cache_dir=cache_dir) as url:
            first = stream_chat(url, model_id(url), messages, 16)
            # a state reaches the disk when its sequence is reused: another conversation takes it
            for i in range(setup.parallel):
                stream_chat(url, model_id(url), f"Unrelated request {i}: name a fruit.", 4)
            time.sleep(1.0)  # the writer thread finishes the file
        messages += [{"role": "assistant", "content": first["text"]},
                     {"role": "user", "content": "And the second?"}]  # fmt: skip
        with serve(setup, "llmflow", "llmflow-after-restart", prompt_cache_dir=cache_dir) as url:
            again = stream_chat(url, model_id(url), messages, 16)
    return {"cold_ttft_s": first["ttft_s"], "after_restart_ttft_s": again["ttft_s"],
            "cached_share": reused_share(again["usage"])}  # fmt: skip


def reused_share(usage: dict[str, Any]) -> float:
    """The share of a prompt the server took from its cache (`cached_tokens`)."""
    return usage["prompt_tokens_details"]["cached_tokens"] / usage["prompt_tokens"]


def greedy_identity(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    """Does reuse change a greedy answer? The same sessions, turn by turn, with the conversation
    cache on and off; with it on, two sequences for all of them, so conversations go to the host
    tier and back, and the time the decode loop waited for saving them."""
    saving: dict[str, Any] = {}
    from llmflow import LLM

    def answers(cache: bool) -> list[str]:
        options = {"n_ctx": args.n_ctx, "parallel": 2, "n_threads": args.threads, "prompt_cache": cache}
        llm = LLM.load(model, engine="llama_cpp_batched", engine_options=options)
        texts = []
        try:
            for s in range(args.identity_sessions):
                messages = [{"role": "system", "content": system_prompt(5000 + s, 120)}]
                for turn in range(3):
                    messages.append({"role": "user", "content": f"Question {turn}: explain rule {turn + s}."})
                    text = llm.generate(messages, {"temperature": 0.0, "max_tokens": 32}).text
                    texts.append(text)
                    messages.append({"role": "assistant", "content": text})
            stats = llm.engine.stats()
            if cache:
                saves = stats.cache_saves_total
                saving.update(saves=saves, restores=stats.cache_restores_total,
                              save_ms_mean=1000 * stats.cache_save_seconds_total / max(1, saves),
                              save_ms_max=1000 * stats.cache_save_seconds_max)  # fmt: skip
        finally:
            llm.close()
        return texts

    on, off = answers(True), answers(False)
    same = sum(a == b for a, b in zip(on, off, strict=True))
    return {"answers": len(on), "identical": same, "weights": model.name, "saving": saving}


def parse_args() -> argparse.Namespace:
    # --n-ctx: per sequence; --system-words: about 1.1k tokens; --pause-ms: before each turn
    p = parser(__doc__, rounds=5, parallel=8, n_ctx=4096, system_words=900, turns=8, answer_tokens=48,
               pause_ms=500, short_requests=8, streams=8, stream_tokens=96, sessions=32,
               revisit_system_words=300, cache_ram_mib=512, identity_sessions=12)  # fmt: skip
    add_peer_arguments(p)
    p.add_argument("--peers-only", action="store_true", help="per server only (no cache tiers, no identity)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    recording = Recording.begin("sessions")
    model = args.model or default_model_path()
    setup = Setup.of(args, model, Path(tempfile.mkdtemp(prefix="llmflow-sessions-")))
    servers = ["llmflow", "llama-server"] + (["example-server"] if args.example_server else [])
    samples: dict[str, Any] = {k: {name: [] for name in servers} for k in ("sessions", "short", "streams")}
    samples["revisits"], samples["restart"] = [], []
    for round_ in range(args.rounds):
        order = rotated(servers, round_)
        with ExitStack() as up:
            urls = {name: up.enter_context(serve(setup, name)) for name in order}
            for kind, measure in (("short", short_requests), ("sessions", sessions)):
                for name, result in measure(urls, 100 * round_, args).items():
                    samples[kind][name].append(result)
        print(f"round {round_ + 1} sessions done", flush=True)
        for name in order:  # one server at a time
            with serve(setup, name) as url:
                samples["streams"][name].append(concurrent_streams(url, 100 * round_ + len(name), args))
            print(f"round {round_ + 1} {name} streams done", flush=True)
        if not args.peers_only:
            samples["revisits"].append(revisits(setup, args, round_ + 1))
            samples["restart"].append(restart(setup, args, round_ + 1))
            print(f"round {round_ + 1} tiers done", flush=True)
    if not args.peers_only:
        samples["greedy_identity"] = greedy_identity(args, model)
    config = {**config_of(args), "model": model.name, "servers": servers}
    hidden = [str(p) for p in (model, setup.logs, args.llama_server, args.example_server) if p]
    summary = summarize(samples, servers)
    recording.write(args.out, config=config, samples=samples, summary=summary, hide=hidden)


#: every server's figures: (its name in the summary, in llmflow's ratios, the measurement, its key there)
FIGURES = (("ttft_turn1_s", "ttft_turn1", "sessions", "ttft_turn1_s"),
           ("ttft_later_s", "ttft_later", "sessions", "ttft_later_s"),
           ("short_ttft_p50_s", "short_ttft", "short", "ttft_p50_s"),
           ("streams_chunks_per_s", "streams", "streams", "chunks_per_s"))  # fmt: skip


def summarize(samples: dict[str, Any], servers: list[str]) -> dict[str, Any]:
    def per_round(kind: str, name: str, key: str) -> list[float]:
        return [r[key] for r in samples[kind][name]]

    def one_by_one(peer: str, kind: str, key: str) -> dict | None:
        """llmflow's TTFT over the peer's, each pair (a later turn, a short request) timed at one moment."""
        rounds = zip(samples[kind]["llmflow"], samples[kind][peer], strict=True)
        pairs = [pair for x, y in rounds for pair in zip(x[key], y[key], strict=True)]
        return spread(a / b for a, b in pairs if a and b)

    summary: dict[str, Any] = {
        "servers": {name: {figure: spread(per_round(kind, name, key)) for figure, _, kind, key in FIGURES}
                    for name in servers},
        "llmflow_over": {peer: {**{ratio: paired_ratios(per_round(kind, "llmflow", key),
                                                        per_round(kind, peer, key))
                                   for _, ratio, kind, key in FIGURES},
                                "ttft_later_turns": one_by_one(peer, "sessions", "later_ttft_s"),
                                "short_requests": one_by_one(peer, "short", "ttft_s")}
                        for peer in servers[1:]},
    }  # fmt: skip
    revisit = samples["revisits"]
    if not revisit:
        return summary
    growth = [(r["rss_end"] - r["rss_start"]) / r["budget_bytes"] for r in revisit
              if r["rss_end"] and r["rss_start"]]  # fmt: skip
    summary["revisits"] = {"cold_over_revisit": spread(r["cold_over_revisit"] for r in revisit),
                           "reused_share_min": min(r["reused_share_min"] for r in revisit),
                           "rss_growth_over_budget": spread(growth),
                           "host_tier_bytes_max": max(r["host_tier_bytes"] for r in revisit),
                           "budget_bytes": revisit[0]["budget_bytes"]}  # fmt: skip
    restarts = samples["restart"]
    cold_over = spread(r["cold_ttft_s"] / r["after_restart_ttft_s"] for r in restarts)
    summary["restart"] = {
        "cold_over_after_restart": cold_over,
        "cached_share": spread(r["cached_share"] for r in restarts),
    }
    summary["greedy_identity"] = samples["greedy_identity"]
    return summary


if __name__ == "__main__":
    main()
