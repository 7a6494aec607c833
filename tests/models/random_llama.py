"""A Llama-architecture model with random FP16 weights in safetensors and a real tokenizer.

Engines that load Hugging Face-format directories (ExLlamaV2, transformers) run on it for real:
the text is gibberish, but shapes, memory traffic and every code path are those of a real model.
Weights are written directly (no model object), so an 8B-shaped model is built in seconds on a GPU.

    python -m tests.models.random_llama OUT_DIR --shape 8b --tokenizer TOKENIZER_DIR --device cuda
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)
SHARD_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class LlamaShape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 8192
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight's name (as transformers' LlamaForCausalLM saves it) and shape."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for n in range(self.num_hidden_layers):
            p = f"model.layers.{n}."
            shapes |= {
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (h, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, h),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (i, h),
                p + "mlp.up_proj.weight": (i, h),
                p + "mlp.down_proj.weight": (h, i),
            }
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    def parameters(self) -> int:
        total = 0
        for shape in self.tensor_shapes().values():
            size = 1
            for dim in shape:
                size *= dim
            total += size
        return total


SHAPES = {
    # small enough to build on a CPU in a second; GQA like the real ones
    "tiny": LlamaShape(512, 1536, 4, 8, 4, 49152, max_position_embeddings=4096),
    # Llama 3.2 1B: 1.24B parameters, 2.5 GB in FP16
    "1b": LlamaShape(2048, 8192, 16, 32, 8, 128256, tie_word_embeddings=True),
    # Llama 3 8B: 8.03B parameters, 16.1 GB in FP16
    "8b": LlamaShape(4096, 14336, 32, 32, 8, 128256),
}


def config_json(shape: LlamaShape, bos_token_id: int | None, eos_token_id: int | None) -> dict:
    fields = asdict(shape)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **fields,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": "float16",
    }


def write_random_llama(
    out_dir: Path, shape: LlamaShape, tokenizer_dir: Path, *, seed: int = 0, device: str = "cpu"
) -> Path:
    """Write config, tokenizer files and random FP16 weights (N(0, 0.02), norms at 1) to `out_dir`."""
    import torch
    from safetensors.torch import save_file

    from llmflow.engines.hf_files import HfModelDir

    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out_dir / name)
    files = HfModelDir(out_dir)
    eos = sorted(files.eos_token_ids())
    config = config_json(shape, files.bos_token_id(), eos[0] if len(eos) == 1 else eos or None)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    generator = torch.Generator(device=device).manual_seed(seed)
    shard: dict[str, torch.Tensor] = {}
    shard_bytes = 0
    index: dict[str, str] = {}

    def flush() -> None:
        nonlocal shard, shard_bytes
        name = f"model-{len(set(index.values())) + 1:05d}.safetensors"
        save_file(shard, str(out_dir / name), metadata={"format": "pt"})
        index.update(dict.fromkeys(shard, name))
        shard, shard_bytes = {}, 0

    for name, dims in shape.tensor_shapes().items():
        if name.endswith("norm.weight"):
            tensor = torch.ones(dims, dtype=torch.float16)
        else:
            tensor = torch.empty(dims, dtype=torch.float16, device=device).normal_(
                0.0, 0.02, generator=generator
            )
        shard[name] = tensor.cpu()
        shard_bytes += tensor.numel() * 2
        if shard_bytes >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    weight_map = {"metadata": {"total_size": shape.parameters() * 2}, "weight_map": index}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(weight_map, indent=2) + "\n")
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--tokenizer", type=Path, required=True, help="a directory with tokenizer.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    write_random_llama(args.out_dir, SHAPES[args.shape], args.tokenizer, seed=args.seed, device=args.device)
    print(args.out_dir)


if __name__ == "__main__":
    main()
