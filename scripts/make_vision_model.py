"""Make a tiny vision-language model with random weights, for tests that need images to reach a
model: a SmolVLM (Idefics3's architecture: a SigLIP-style vision tower, a pixel-shuffle connector
and a Llama text model) in transformers' own random init, with the embedded SmolLM2's tokenizer,
saved as a Hugging Face directory and converted by llama.cpp's own `convert_hf_to_gguf.py` into
the text model's GGUF and its `mmproj` projector GGUF, as a downloaded vision model comes.

    python scripts/make_vision_model.py OUT_DIR [--seed 0] [--llama-cpp DIR] [--no-gguf]

Writes `OUT_DIR/hf/` (config.json, model.safetensors, preprocessor_config.json),
`OUT_DIR/vision-f16.gguf` and `OUT_DIR/mmproj-vision-f16.gguf`. An image becomes
`(IMAGE_SIZE / PATCH_SIZE)**2 / SCALE_FACTOR**2` tokens of the text model (4 here), the count a
test can check. Its vocabulary is the embedded SmolLM2's and the special tokens SmolVLM adds for
the markup llama.cpp's projector writes around each image (`IMAGE_MARKUP`). `--llama-cpp`: a
llama.cpp source tree (default: $LLAMA_CPP_SRC, else llama-cpp-python's sdist, as `make_lora.py`
finds it). Needs torch, transformers and safetensors.
Loading the pair in llama.cpp needs its multimodal library (`mtmd`), which llmflow's build leaves
out for now (`scripts/build_llama_cpp.py`: LLAVA_BUILD=OFF).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_lora import embedded_model, llama_cpp_source  # this script's own directory

IMAGE_SIZE = 64
PATCH_SIZE = 16
SCALE_FACTOR = 2
#: small enough to make and convert in seconds on a CPU
VISION = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": IMAGE_SIZE,
    "patch_size": PATCH_SIZE,
}
TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}


#: the special tokens SmolVLM's vocabulary adds, which llama.cpp's Idefics3 projector writes around
#: every image (looked up by text: a vocabulary without them gets no id for them)
IMAGE_MARKUP = ("<fake_token_around_image>", "<global-img>", "<image>")
#: llama.cpp's token type of a control token
CONTROL = 3


def image_tokens() -> int:
    """The text-model tokens one image becomes."""
    return (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2


def tokenizer_keys(llama_cpp: Path, model: Path) -> list[dict[str, Any]]:
    """Every `tokenizer.*` key of the embedded model's GGUF, with its value types, and
    `IMAGE_MARKUP` appended to its vocabulary as control tokens."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf

    reader = gguf.GGUFReader(str(model))
    keys = []
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            main = field.types[0]
            sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
            keys.append({"key": field.name, "type": main.name, "sub_type": sub and sub.name})
            keys[-1]["value"] = field.contents()
    values = {k["key"]: k for k in keys}
    values["tokenizer.ggml.tokens"]["value"] += list(IMAGE_MARKUP)
    values["tokenizer.ggml.token_type"]["value"] += [CONTROL] * len(IMAGE_MARKUP)
    return keys


def random_hf_model(out: Path, keys: list[dict[str, Any]], seed: int) -> None:
    """A SmolVLM of the shapes above in transformers' random init (float32), and the
    preprocessor config llama.cpp reads the image size and normalisation from."""
    import torch
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    values = {k["key"]: k["value"] for k in keys}
    vocab = len(values["tokenizer.ggml.tokens"])
    text = {
        **TEXT,
        "vocab_size": vocab,
        "bos_token_id": values["tokenizer.ggml.bos_token_id"],
        "eos_token_id": values["tokenizer.ggml.eos_token_id"],
        "model_type": "llama",
    }
    image_token = values["tokenizer.ggml.tokens"].index("<image>")
    config = SmolVLMConfig(
        vision_config=VISION, text_config=text, scale_factor=SCALE_FACTOR, image_token_id=image_token
    )
    torch.manual_seed(seed)
    SmolVLMForConditionalGeneration(config).save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    saved["text_config"]["architectures"] = ["LlamaForCausalLM"]  # what converts the text model
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    preprocessor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "do_resize": True,
        "size": {"longest_edge": IMAGE_SIZE},
        "max_image_size": {"longest_edge": IMAGE_SIZE},
        "do_image_splitting": False,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))


def convert_text(llama_cpp: Path, hf_dir: Path, keys: list[dict[str, Any]], out: Path) -> None:
    """The text model in f16, its vocabulary the stored keys (the directory has no tokenizer
    files): llama.cpp's converter in this process, its vocabulary step replaced."""
    sys.path.insert(0, str(llama_cpp))
    import convert_hf_to_gguf
    import gguf
    from conversion.llama import LlamaModel

    def set_vocab(self: Any) -> None:
        for entry in keys:
            sub = entry["sub_type"] and gguf.GGUFValueType[entry["sub_type"]]
            self.gguf_writer.add_key_value(
                entry["key"], entry["value"], gguf.GGUFValueType[entry["type"]], sub_type=sub or None
            )

    LlamaModel.set_vocab = set_vocab
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outtype", "f16", "--outfile", str(out)]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def convert_mmproj(llama_cpp: Path, hf_dir: Path, out: Path) -> None:
    """The vision tower and connector as an mmproj file (`--mmproj`), in a process of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(llama_cpp / "gguf-py"), str(llama_cpp)])}
    command = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf_dir), "--mmproj"]
    command += ["--outtype", "f16", "--outfile", str(out)]
    subprocess.run(command, check=True, env=env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llama-cpp", type=Path, help="a llama.cpp source tree (default: the sdist's)")
    parser.add_argument("--no-gguf", action="store_true", help="the Hugging Face directory only")
    args = parser.parse_args(argv)
    llama_cpp = llama_cpp_source(args.llama_cpp)
    keys = tokenizer_keys(llama_cpp, embedded_model())
    hf_dir = args.out / "hf"
    random_hf_model(hf_dir, keys, args.seed)
    written = [hf_dir]
    if not args.no_gguf:
        text, mmproj = args.out / "vision-f16.gguf", args.out / "mmproj-vision-f16.gguf"
        convert_text(llama_cpp, hf_dir, keys, text)
        convert_mmproj(llama_cpp, hf_dir, mmproj)
        written += [text, mmproj]
    print(json.dumps({"written": [str(p) for p in written], "image_tokens": image_tokens()}))


if __name__ == "__main__":
    main()
