"""Images through llama.cpp's multimodal library on whatever device the build offers (CUDA on a
GPU machine, the CPU elsewhere): the tiny random-weight vision model (`scripts/make_vision_model.py`)
and its projector loaded by the `llama_cpp` engine, a chat answered without and with an image, and
the same image again in another conversation, which must come from the encoded-image cache.

    python benchmarks/gpu/check_images_cuda.py --model DIR/vision-f16.gguf \
        --mmproj DIR/mmproj-vision-f16.gguf --out images_cuda.json

(default: the pair in build/gpu/vision, the text model maybe quantized to Q8_0 to carry less:
`make_gguf.py quantize`).

Prints and writes: where the model ran, each answer's prompt tokens (with, without the image:
the difference is what the image costs in positions), cached prompt tokens, the encoded-image
cache's hits and misses after each answer, and each answer's wall time. Exits 1 when an image
reached no model position or a resent image was encoded again.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llmflow import LLM  # noqa: E402

VISION = ROOT / "build" / "gpu" / "vision"
QUESTION = "What is in the picture?"


def png(size: int = 64) -> bytes:
    """A real PNG: a colour gradient, so that no two pixel rows are alike."""
    from PIL import Image

    image = Image.new("RGB", (size, size))
    image.putdata([(4 * x % 256, 4 * y % 256, 128) for y in range(size) for x in range(size)])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def messages(text: str, image: bytes | None) -> list[dict[str, Any]]:
    if image is None:
        return [{"role": "user", "content": text}]
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def answer(llm: LLM, label: str, text: str, image: bytes | None) -> dict[str, Any]:
    """One greedy answer, with what it cost and the encoded-image cache's counts after it."""
    started = time.perf_counter()
    done = llm.generate(messages(text, image), {"max_tokens": 8, "temperature": 0.0})
    wall = time.perf_counter() - started
    # the engine's projector: its encoded-image cache is what a resent image must hit
    encoded = llm.engine.image_stats()
    assert encoded is not None, "the engine reads no images"
    row = {
        "label": label,
        "prompt_tokens": done.usage.prompt_tokens,
        "cached_tokens": done.usage.cached_tokens,
        "completion_tokens": done.usage.completion_tokens,
        "finish_reason": done.finish_reason,
        "wall_s": round(wall, 4),
        "image_cache_hits": encoded.reused,
        "image_cache_misses": encoded.encoded,
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="default: build/gpu/vision's text model")
    parser.add_argument("--mmproj", type=Path, default=VISION / "mmproj-vision-f16.gguf")
    parser.add_argument("--n-gpu-layers", type=int, default=-1, help="-1: every layer (on a GPU build)")
    parser.add_argument("--engine", default="llama_cpp", choices=["llama_cpp", "llama_cpp_batched"])
    parser.add_argument("--out", type=Path, default=Path("images_cuda.json"))
    args = parser.parse_args()
    if args.model is None:
        found = sorted(VISION.glob("vision-*.gguf"))
        if not found:
            parser.error(f"--model: no vision-*.gguf in {VISION}")
        args.model = found[0]
    import llama_cpp

    options = {"n_ctx": 512, "mmproj": str(args.mmproj), "n_gpu_layers": args.n_gpu_layers}
    started = time.perf_counter()
    llm = LLM.load(args.model, engine=args.engine, engine_options=options)
    doc: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "llama_cpp_python": llama_cpp.__version__,
            "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        },
        "model": args.model.name,
        "mmproj": args.mmproj.name,
        "engine": args.engine,
        "engine_options": {**options, "mmproj": args.mmproj.name},
        "load_s": round(time.perf_counter() - started, 3),
        "input_modalities": list(llm.engine.input_modalities),
    }
    try:
        image = png()
        rows = [
            answer(llm, "text only", QUESTION, None),
            answer(llm, "with the image", QUESTION, image),
            answer(llm, "the same chat again", QUESTION, image),
            answer(llm, "the same image, another question", "Describe it in one word.", image),
        ]
    finally:
        llm.close()
    text, first, again, other = rows
    doc["answers"] = rows
    doc["prompt_tokens_added_by_image"] = first["prompt_tokens"] - text["prompt_tokens"]
    doc["same_chat_cached_tokens"] = again["cached_tokens"]
    doc["resent_image_from_cache"] = other["image_cache_hits"] > first["image_cache_hits"]
    doc["ok"] = (
        doc["prompt_tokens_added_by_image"] > 0
        and first["image_cache_misses"] > 0
        and doc["resent_image_from_cache"]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("machine", "load_s", "prompt_tokens_added_by_image", "ok")}))
    if not doc["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
