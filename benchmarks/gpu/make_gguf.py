"""GGUF files to measure with that no one has to download: random weights in a real model's shape,
with the embedded SmolLM2's tokenizer.

Two steps, because the machine with the GPU has no embedded model and carries little:

    # here: the embedded model's tokenizer (vocabulary, merges, special tokens, chat template)
    python benchmarks/gpu/make_gguf.py tokenizer LLAMA_CPP_SRC out/tokenizer.json
    # there: random init with transformers -> convert_hf_to_gguf.py (f16) -> llama-quantize
    python benchmarks/gpu/make_gguf.py model LLAMA_CPP_SRC out/tokenizer.json OUT_DIR \\
        --shape llama3-8b --quantize-with BIN/llama-quantize --types Q4_K_M

LLAMA_CPP_SRC: the llama.cpp source llama-cpp-python was built from. The f16 file needs only its
Python, so it can be made while the build runs; run again once `llama-quantize` exists, the
command only quantizes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Llama 3 8B's shape with SmolLM2's 49,152-token vocabulary; SmolLM2-135M's own shape
SHAPES: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=False),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, rope_theta=100000.0, tie_word_embeddings=True),
}  # fmt: skip
#: what both shapes share
COMMON = {"max_position_embeddings": 8192, "rms_norm_eps": 1e-5}


def _gguf_module(llama_cpp_src: Path) -> Any:
    sys.path.insert(0, str(llama_cpp_src / "gguf-py"))
    import gguf

    return gguf


def extract_tokenizer(llama_cpp_src: Path, out: Path, model: Path | None) -> None:
    """Every `tokenizer.*` key of a GGUF file (default: the embedded model), with its value types."""
    from llmflow.model_files import resolve_model_path

    gguf = _gguf_module(llama_cpp_src)
    reader = gguf.GGUFReader(resolve_model_path(model))
    entries = []
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        entries.append({"key": field.name, "type": main.name, "sub_type": sub and sub.name,
                        "value": field.contents()})  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entries))
    print(f"{len(entries)} tokenizer keys -> {out}")


def random_hf_model(shape: str, vocab_size: int, bos: int, eos: int, out: Path, seed: int) -> None:
    """A Llama of `shape` with transformers' own random init (bf16, built on the GPU if any)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**SHAPES[shape], **COMMON, vocab_size=vocab_size, bos_token_id=bos, eos_token_id=eos)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(out)
    del model


def convert(llama_cpp_src: Path, hf_dir: Path, tokenizer: list[dict[str, Any]], out: Path) -> None:
    """`convert_hf_to_gguf.py --outtype f16`, its vocabulary step replaced by the stored keys."""
    _gguf_module(llama_cpp_src)
    sys.path.insert(0, str(llama_cpp_src))
    import convert_hf_to_gguf
    import gguf
    from conversion.llama import LlamaModel

    def set_vocab(self: Any) -> None:
        for entry in tokenizer:
            sub = entry["sub_type"] and gguf.GGUFValueType[entry["sub_type"]]
            self.gguf_writer.add_key_value(
                entry["key"], entry["value"], gguf.GGUFValueType[entry["type"]], sub_type=sub or None
            )

    LlamaModel.set_vocab = set_vocab
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outtype", "f16", "--outfile", str(out)]
    convert_hf_to_gguf.main()


def make_model(args: argparse.Namespace) -> None:
    """The f16 file (kept when it is there already), then each quantized copy not there yet: a
    step cut short leaves no file behind (written under a temporary name, renamed when done), so
    running it again finishes the work."""
    tokenizer = json.loads(args.tokenizer.read_text())
    values = {e["key"]: e["value"] for e in tokenizer}
    vocab_size = len(values["tokenizer.ggml.tokens"])
    args.out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    f16 = args.out / f"{args.shape}-f16.gguf"
    if not f16.exists():
        hf_dir = args.out / f"{args.shape}-hf"
        partial = f16.with_suffix(".part")
        started = time.perf_counter()
        bos, eos = values["tokenizer.ggml.bos_token_id"], values["tokenizer.ggml.eos_token_id"]
        random_hf_model(args.shape, vocab_size, bos, eos, hf_dir, args.seed)
        timings["random_init_and_save_s"] = time.perf_counter() - started
        started = time.perf_counter()
        convert(args.llama_cpp_src, hf_dir, tokenizer, partial)
        partial.rename(f16)
        timings["convert_f16_s"] = time.perf_counter() - started
        subprocess.run(["rm", "-rf", str(hf_dir)], check=True)
    for quant in args.types:
        target = args.out / f"{args.shape}-{quant}.gguf"
        if target.exists():
            continue
        partial = target.with_suffix(".part")
        started = time.perf_counter()
        subprocess.run([str(args.quantize_with), str(f16), str(partial), quant], check=True)
        partial.rename(target)
        timings[f"quantize_{quant}_s"] = time.perf_counter() - started
    print(json.dumps({"shape": args.shape, "vocab_size": vocab_size, **timings}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    tok = steps.add_parser("tokenizer", help="store the embedded model's tokenizer keys as JSON")
    tok.add_argument("llama_cpp_src", type=Path)
    tok.add_argument("out", type=Path)
    tok.add_argument("--from", dest="source", type=Path, help="a GGUF file; default: the embedded model")
    model = steps.add_parser("model", help="a random model in f16 GGUF, and quantized copies")
    model.add_argument("llama_cpp_src", type=Path)
    model.add_argument("tokenizer", type=Path)
    model.add_argument("out", type=Path)
    model.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    model.add_argument("--quantize-with", type=Path, help="the llama-quantize binary")
    model.add_argument("--types", nargs="*", default=[], help="quantization types, e.g. Q4_K_M")
    model.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.step == "tokenizer":
        extract_tokenizer(args.llama_cpp_src, args.out, args.source)
    elif args.types and args.quantize_with is None:
        parser.error("--types needs --quantize-with")
    else:
        make_model(args)


if __name__ == "__main__":
    main()
