"""Images in a chat: what encoding one costs, and what llmflow's encoded-image cache saves, against
llama.cpp's `llama-server --mmproj` on the same GGUF pair and threads.

Each request a conversation of its own (no prompt cache answers it): `text`, a question alone;
`cold`, a question about a new photo-like PNG; `same`, one of the cold images again. llmflow takes
a known image's embeddings from its cache; llama-server only matches a cached prompt prefix, so it
encodes the image again. The image's cost: cold TTFT less text TTFT; what reuse saves: cold less
same. Servers alternate, the first rotating; median (min-max) over rounds of each round's median.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.peers.compare_servers import Setup, add_peer_arguments, serve
from benchmarks.record import REPO, Recording, config_of, paired_ratios, spread
from benchmarks.serve_process import CLIENT, metric, model_id, stream_chat
from benchmarks.suite import parser

KINDS = ("text", "cold", "same")
SERVERS = ("llmflow", "llama-server")
SHAPE = "smolvlm-256m"
DEFAULT_DIR = Path.home() / ".cache" / "llmflow" / f"vision-{SHAPE}"


def photo(seed: int, size: int = 512) -> str:
    """A photo-like PNG as a data URI: smooth colour gradients with grain, its own for each seed
    (an image's hash keys every image cache, so a new seed is an image never seen)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    channels = []
    for _ in range(3):
        a, b, c = rng.uniform(-1, 1, 3)
        channels.append(0.5 + 0.25 * np.sin(6 * (a * x + b * y) + c) + 0.2 * (a * x * y))
    pixels = np.stack(channels, axis=-1) + rng.normal(0, 0.06, (size, size, 3))
    image = Image.fromarray((np.clip(pixels, 0, 1) * 255).astype(np.uint8), "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def messages(tag: str, image: str | None) -> list[dict[str, Any]]:
    """A conversation of its own (`tag` opens it), with or without an image."""
    system = {"role": "system", "content": f"Conversation {tag}. You answer in one short sentence."}
    if image is None:
        return [system, {"role": "user", "content": "What colour is the sky on a clear day?"}]
    parts = [{"type": "text", "text": "What is in this picture?"},
             {"type": "image_url", "image_url": {"url": image}}]  # fmt: skip
    return [system, {"role": "user", "content": parts}]


def timed_chat(url: str, model: str, conversation: list[dict], max_tokens: int) -> dict[str, Any]:
    """One streamed chat request: TTFT, end-to-end time, prompt tokens and llama-server's own
    prompt time (`timings.prompt_ms`) where sent."""
    answer = stream_chat(url, model, conversation, max_tokens)
    timings = answer["timings"] or {}
    return {"ttft_s": answer["ttft_s"], "e2e_s": answer["e2e_s"], "prompt_ms": timings.get("prompt_ms"),
            "prompt_tokens": (answer["usage"] or {}).get("prompt_tokens")}  # fmt: skip


def image_chunks(url: str) -> dict[str, float]:
    """llmflow's encoded and reused image chunks so far (its `/metrics`)."""
    text = CLIENT.get(url.removesuffix("/v1") + "/metrics", timeout=30).text
    return {kind: metric(text, "llmflow_image_chunks_total", outcome=kind) for kind in ("encoded", "reused")}


def one_server(url: str, name: str, round_: int, args: argparse.Namespace) -> dict[str, Any]:
    """A warm-up (one text, one image request), then `args.requests` of each kind."""
    model, tag = model_id(url), f"{name}-{round_}"
    timed_chat(url, model, messages(f"warm-{tag}", None), args.max_tokens)
    timed_chat(url, model, messages(f"warm-image-{tag}", photo(10**6 + round_)), args.max_tokens)
    before = image_chunks(url) if name == "llmflow" else None
    # the same image seeds for every server in a round, new ones each round
    images = [photo(1000 * (round_ + 1) + i) for i in range(args.requests)]
    requests: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for i, image in enumerate(images):
        requests["text"].append(timed_chat(url, model, messages(f"text-{tag}-{i}", None), args.max_tokens))
        requests["cold"].append(timed_chat(url, model, messages(f"cold-{tag}-{i}", image), args.max_tokens))
    for i, image in enumerate(images):
        requests["same"].append(timed_chat(url, model, messages(f"same-{tag}-{i}", image), args.max_tokens))
    result: dict[str, Any] = {"requests": requests}
    for kind in KINDS:
        for key in ("ttft_s", "prompt_ms"):
            found = [r[key] for r in requests[kind] if r[key] is not None]
            result[f"{kind}_{key}"] = statistics.median(found) if found else None
    if before is not None:
        after = image_chunks(url)
        result["image_chunks"] = {k: after[k] - before[k] for k in after}
    return result


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def values(name: str, key: str) -> list[float | None]:
        return [r[key] for r in rounds[name]]

    def less(name: str, a: str, b: str) -> dict | None:
        return spread(None if r[a] is None or r[b] is None else r[a] - r[b] for r in rounds[name])

    servers = {}
    for name in rounds:
        entry = {f"{kind}_ttft_s": spread(values(name, f"{kind}_ttft_s")) for kind in KINDS}
        entry["image_cost_s"] = less(name, "cold_ttft_s", "text_ttft_s")
        entry["reuse_saves_s"] = less(name, "cold_ttft_s", "same_ttft_s")
        if any(v is not None for v in values(name, "cold_prompt_ms")):
            entry.update({f"{kind}_prompt_ms": spread(values(name, f"{kind}_prompt_ms")) for kind in KINDS})
        if "image_chunks" in rounds[name][0]:
            entry["image_chunks"] = {k: sum(r["image_chunks"][k] for r in rounds[name])
                                     for k in ("encoded", "reused")}  # fmt: skip
        servers[name] = entry
    # round by round, where both servers ran (a round without a figure left out)
    ratios = {f"{kind}_ttft": paired_ratios(*(values(name, f"{kind}_ttft_s") for name in SERVERS))
              for kind in (KINDS if set(SERVERS) <= set(rounds) else ())}  # fmt: skip
    return {"servers": servers, "llmflow_over_llama_server": ratios}


def default_model(directory: Path) -> tuple[Path, Path]:
    """The random-weight SmolVLM-256M-shaped pair (`scripts/make_vision_model.py`), made once."""
    model, mmproj = directory / "vision-f16.gguf", directory / "mmproj-vision-f16.gguf"
    if not (model.is_file() and mmproj.is_file()):
        script = REPO / "scripts" / "make_vision_model.py"
        subprocess.run([sys.executable, str(script), str(directory), "--shape", SHAPE], check=True)
    return model, mmproj


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, rounds=3, parallel=2, n_ctx=2048, max_tokens=4)  # --n-ctx: per sequence
    p.add_argument("--requests", type=int, default=2, help="requests of each kind per server and round")
    add_peer_arguments(p)  # --model: the text model (default: a SHAPE-shaped one, made)
    p.add_argument("--mmproj", type=Path, help="its projector GGUF (with --model)")
    args = p.parse_args()
    if (args.model is None) != (args.mmproj is None):
        p.error("--model and --mmproj go together")
    return args


def main() -> None:
    args = parse_args()
    recording = Recording.begin("images")
    model, mmproj = (args.model, args.mmproj) if args.model else default_model(DEFAULT_DIR)
    setup = Setup.of(args, model, Path(tempfile.mkdtemp(prefix="llmflow-images-")), "--mmproj", str(mmproj))
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVERS}
    for round_ in range(args.rounds):
        for name in SERVERS if round_ % 2 == 0 else SERVERS[::-1]:
            with serve(setup, name, **({"mmproj": str(mmproj)} if name == "llmflow" else {})) as url:
                rounds[name].append(one_server(url, name, round_, args))
            print(f"round {round_ + 1} {name} done", flush=True)
    summary = summarize(rounds)
    samples = {name: [r.pop("requests") for r in rounds[name]] for name in rounds}
    config = {**config_of(args), "model": model.name, "mmproj": mmproj.name, "servers": list(SERVERS),
              "image": "512x512 PNG"}  # fmt: skip
    if not args.model:
        config["shape"] = SHAPE
    hidden = [str(p) for p in (model, mmproj, setup.logs, args.llama_server)]
    recording.write(args.out, config=config, samples=samples, summary=summary, hide=hidden)


if __name__ == "__main__":
    main()
