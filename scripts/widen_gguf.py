"""Make a GGUF of a bigger Llama shape that computes what a small Llama computes: the small
model's weights placed inside the bigger tensors, every other weight zero.

Why: a GPU measurement needs a model whose passes cost what a Llama 3 8B pass costs, and for
speculative decoding also one whose answers copy their prompt. Random weights give the first and
copy nothing; the embedded SmolLM2 copies but is small. Widened, it is both: every tensor has the
8B shape and (once quantized) the 8B type, so a pass does the 8B's work, and the answers are
SmolLM2's up to rounding.

    python scripts/widen_gguf.py OUT.gguf [--small SMALL.gguf] [--gguf-py DIR] \\
        [--hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --layers 32]

Writes f16 (quantize it with `llama-quantize OUT.gguf OUT-Q4_K_M.gguf Q4_K_M`). SMALL: a Llama
GGUF, the embedded model by default. `--gguf-py`: llama.cpp's gguf-py (default: the installed
`gguf` package).

How the small model fits (d, D: the heads' widths; h, H: the residual widths):
- The residual's first h dimensions are the small model's; the rest stay zero, since every
  matrix that writes the residual is zero outside those rows.
- RMS norms average over H, not h: each norm's weights are scaled by sqrt(h / H) and epsilon by
  h / H, so the normalized values are the small model's.
- Rotary pair i of a small head becomes pair i * D / d of a big one, which turns at the same
  frequency with the small model's rope base; the other pairs of q and k are zero. Queries are
  scaled by sqrt(D / d) for attention's 1 / sqrt(D).
- Small query head r of key/value group g becomes big query head g * R + r (R: the big model's
  query heads per group), so it reads the same group; unused heads and groups are zero, and so
  are the output projection's columns that would read them.
- Layers beyond the small model's have zero output projections: the residual passes through.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    """A Llama's sizes, as its GGUF keys give them."""

    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    layers: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def small_shape(fields: dict[str, Any], vocab: int) -> Shape:
    return Shape(hidden=fields["llama.embedding_length"], heads=fields["llama.attention.head_count"],
                 kv_heads=fields["llama.attention.head_count_kv"], ffn=fields["llama.feed_forward_length"],
                 layers=fields["llama.block_count"], vocab=vocab)  # fmt: skip


def check(small: Shape, big: Shape) -> None:
    """Refuse a big shape the small one does not fit in."""
    problems = [
        (min(big.hidden - small.hidden, big.ffn - small.ffn, big.layers - small.layers) >= 0, "smaller"),
        (big.head_dim % small.head_dim == 0, "head width not a multiple of the model's"),
        (big.kv_heads >= small.kv_heads, "fewer key/value heads than the model"),
        (big.heads // big.kv_heads >= small.heads // small.kv_heads, "fewer query heads per group"),
        (big.hidden % big.heads == 0, "hidden size not a multiple of the heads"),
    ]  # fmt: skip
    for ok, why in problems:
        if not ok:
            raise SystemExit(f"widen_gguf: the big shape is {why}: {big} for {small}")


def head_rows(small: Shape, big: Shape, small_head: int, big_head: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of one small head and the big head's rows they go to (rotary pair i to i * D / d)."""
    d, ratio = small.head_dim, big.head_dim // small.head_dim
    within = np.arange(d)
    placed = (within // 2) * 2 * ratio + within % 2
    return small_head * d + within, big_head * big.head_dim + placed


def query_rows(small: Shape, big: Shape) -> tuple[np.ndarray, np.ndarray]:
    per_small, per_big = small.heads // small.kv_heads, big.heads // big.kv_heads
    pairs = [head_rows(small, big, h, (h // per_small) * per_big + h % per_small) for h in range(small.heads)]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def kv_rows(small: Shape, big: Shape) -> tuple[np.ndarray, np.ndarray]:
    pairs = [head_rows(small, big, g, g) for g in range(small.kv_heads)]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def placed(weight: np.ndarray, rows: int, cols: int, row_map: Any = None, col_map: Any = None) -> np.ndarray:
    """`weight` inside a zero matrix of (rows, cols): its rows and columns where the maps (source
    indices, target indices) say, else in the top-left corner."""
    r_from, r_to = row_map if row_map is not None else (np.arange(weight.shape[0]),) * 2
    c_from, c_to = col_map if col_map is not None else (np.arange(weight.shape[1]),) * 2
    out = np.zeros((rows, cols), dtype=np.float32)
    out[np.ix_(r_to, c_to)] = weight[np.ix_(r_from, c_from)]
    return out


def widened_tensors(small: Shape, big: Shape, weights: dict[str, np.ndarray]) -> Iterator[tuple[str, Any]]:
    """Every tensor of the big model, in GGUF order, as float32 (norms) or float16."""
    norm_scale = math.sqrt(small.hidden / big.hidden)
    q_map, kv_map = query_rows(small, big), kv_rows(small, big)
    q_scale = math.sqrt(big.head_dim / small.head_dim)

    def norm(name: str) -> np.ndarray:
        out = np.zeros(big.hidden, dtype=np.float32)
        out[: small.hidden] = weights[name] * norm_scale if name in weights else norm_scale
        return out

    embedding = placed(weights["token_embd.weight"], big.vocab, big.hidden).astype(np.float16)
    yield "token_embd.weight", embedding
    for layer in range(big.layers):
        p = f"blk.{layer}."

        def get(name: str, shape: tuple[int, int], p: str = p) -> np.ndarray:
            return weights[p + name] if p + name in weights else np.zeros(shape, dtype=np.float32)

        q_width, kv_width = big.heads * big.head_dim, big.kv_heads * big.head_dim
        yield p + "attn_norm.weight", norm(p + "attn_norm.weight")
        q = get("attn_q.weight", (small.heads * small.head_dim, small.hidden)) * q_scale
        yield p + "attn_q.weight", placed(q, q_width, big.hidden, row_map=q_map).astype(np.float16)
        for name in ("attn_k.weight", "attn_v.weight"):
            w = get(name, (small.kv_heads * small.head_dim, small.hidden))
            yield p + name, placed(w, kv_width, big.hidden, row_map=kv_map).astype(np.float16)
        out = get("attn_output.weight", (small.hidden, small.heads * small.head_dim))
        yield p + "attn_output.weight", placed(out, big.hidden, q_width, col_map=q_map).astype(np.float16)
        yield p + "ffn_norm.weight", norm(p + "ffn_norm.weight")
        for name in ("ffn_gate.weight", "ffn_up.weight"):
            w = get(name, (small.ffn, small.hidden))
            yield p + name, placed(w, big.ffn, big.hidden).astype(np.float16)
        down = get("ffn_down.weight", (small.hidden, small.ffn))
        yield p + "ffn_down.weight", placed(down, big.hidden, big.ffn).astype(np.float16)
    yield "output_norm.weight", norm("output_norm.weight")
    output = weights.get("output.weight")
    if output is not None:
        embedding = placed(output, big.vocab, big.hidden).astype(np.float16)
    yield "output.weight", embedding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--small", type=Path, help="a Llama GGUF; default: the embedded model")
    parser.add_argument("--gguf-py", type=Path, help="llama.cpp's gguf-py directory")
    for name, default in (("hidden", 4096), ("heads", 32), ("kv-heads", 8), ("ffn", 14336), ("layers", 32)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--name", default="SmolLM2-135M-Instruct widened to Llama 3 8B's shape")
    args = parser.parse_args()
    if args.gguf_py:
        sys.path.insert(0, str(args.gguf_py))
    import gguf

    if args.small is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from llmflow.model_files import resolve_model_path

        args.small = Path(resolve_model_path(None))
    reader = gguf.GGUFReader(args.small)
    fields = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("tokenizer.")}
    if fields.get("general.architecture") != "llama":
        raise SystemExit(f"widen_gguf: {args.small} is not a Llama GGUF")
    weights = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(t.shape.tolist()[::-1])
               for t in reader.tensors}  # fmt: skip
    vocab = weights["token_embd.weight"].shape[0]
    small = small_shape(fields, vocab)
    big = Shape(args.hidden, args.heads, args.kv_heads, args.ffn, args.layers, vocab)
    check(small, big)

    writer = gguf.GGUFWriter(args.out, "llama")
    writer.add_name(args.name)
    writer.add_block_count(big.layers)
    writer.add_context_length(fields["llama.context_length"])
    writer.add_embedding_length(big.hidden)
    writer.add_feed_forward_length(big.ffn)
    writer.add_head_count(big.heads)
    writer.add_head_count_kv(big.kv_heads)
    writer.add_rope_freq_base(fields["llama.rope.freq_base"])
    writer.add_rope_dimension_count(big.head_dim)
    eps = fields["llama.attention.layer_norm_rms_epsilon"]
    writer.add_layer_norm_rms_eps(eps * small.hidden / big.hidden)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            main_type = field.types[0]
            sub = field.types[-1] if main_type == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), main_type, sub_type=sub)
    for name, tensor in widened_tensors(small, big, weights):  # held whole: 16 GB for the 8B shape
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.out}: {small} -> {big}")


if __name__ == "__main__":
    main()
