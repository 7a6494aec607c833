"""Make a vision-language model with random weights (tiny unless `--shape` says), for tests
that need images to reach a model and benchmarks that time them: a SmolVLM (Idefics3's
architecture: a SigLIP-style vision tower, a pixel-shuffle connector and a Llama text model) in
transformers' own random init, with the embedded SmolLM2's tokenizer, saved as a Hugging Face
directory that transformers loads whole (`AutoProcessor`, `AutoModelForImageTextToText`) and
converted by llama.cpp's own `convert_hf_to_gguf.py` into the text model's GGUF and its `mmproj`
projector GGUF, as a downloaded vision model comes.

    python scripts/make_vision_model.py OUT_DIR [--shape tiny] [--seed 0] [--llama-cpp DIR] [--no-gguf]

Writes `OUT_DIR/hf/` (config.json, model.safetensors, the tokenizer with SmolVLM's image
tokens added, its chat template, preprocessor_config.json and processor_config.json),
`OUT_DIR/vision-f16.gguf` and `OUT_DIR/mmproj-vision-f16.gguf`. An image becomes
`(image_size / patch_size)**2 / scale_factor**2` tokens of the text model (4 for `tiny`), the count a
test can check, which the processor wraps in `IMAGE_WRAPPER` more tokens (3 here). The processor
is Idefics3's: SmolVLM's own expands an image the same way, and adds video, which needs
`num2words`. `--llama-cpp`: a llama.cpp source tree (default: $LLAMA_CPP_SRC, else
llama-cpp-python's sdist, as `make_lora.py` finds it). `--shape smolvlm-256m`:
SmolVLM-256M's sizes in random weights (64 tokens an image), for timing image encoding
(`benchmarks/bench_images.py`). Needs torch, transformers and safetensors.
Loading the pair in llama.cpp needs its multimodal library (`mtmd`), which llmflow's build
carries (`scripts/build_llama_cpp.py`: LLAVA_BUILD=ON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_lora import embedded_model, llama_cpp_source  # this script's own directory

#: SmolVLM's tokens, added to the SmolLM2 vocabulary (the processor's image expansion and the
#: template's end of turn)
ADDED_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
#: the tokens around an image's run of `<image>`: <fake_token_around_image><global-img> before, and
#: <fake_token_around_image> after
IMAGE_WRAPPER = 3
#: SmolVLM's chat template, for a message's content as text or as parts (text and images)
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}<image>{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
#: small enough to make and convert in seconds on a CPU
VISION = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": 64,
    "patch_size": 16,
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


@dataclass(frozen=True)
class Shape:
    """A model's sizes: the vision tower, the text model and the connector's pixel shuffle."""

    vision: dict[str, Any]
    text: dict[str, Any]
    scale_factor: int

    @property
    def image_size(self) -> int:
        return int(self.vision["image_size"])

    @property
    def patch_size(self) -> int:
        return int(self.vision["patch_size"])


#: `tiny` for tests; `smolvlm-256m`: SmolVLM-256M's sizes (a SigLIP base-sized tower at 512 pixels,
#: SmolLM2-135M as the text model), big enough that encoding an image costs what it does in use
SHAPES = {
    "tiny": Shape(VISION, TEXT, scale_factor=2),
    "smolvlm-256m": Shape(
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
        },
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
        scale_factor=4,
    ),
}
IMAGE_SIZE = SHAPES["tiny"].image_size
PATCH_SIZE = SHAPES["tiny"].patch_size
SCALE_FACTOR = SHAPES["tiny"].scale_factor


def image_tokens(shape: Shape = SHAPES["tiny"]) -> int:
    """The text-model tokens one image becomes."""
    return (shape.image_size // shape.patch_size) ** 2 // shape.scale_factor**2


def tokenizer_keys(llama_cpp: Path, model: Path) -> list[dict[str, Any]]:
    """Every `tokenizer.*` key of the embedded model's GGUF, with its value types, the added
    tokens appended (control tokens) as a converted SmolVLM's vocabulary holds them."""
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
    return with_added_tokens(llama_cpp, keys)


def with_added_tokens(llama_cpp: Path, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`keys` with `ADDED_TOKENS` appended to the vocabulary (control tokens)."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf

    for entry in keys:
        if entry["key"] == "tokenizer.ggml.tokens":
            entry["value"] = [*entry["value"], *ADDED_TOKENS]
        elif entry["key"] == "tokenizer.ggml.token_type":
            entry["value"] = [*entry["value"], *[int(gguf.TokenType.CONTROL)] * len(ADDED_TOKENS)]
        elif entry["key"] == "tokenizer.ggml.scores":
            entry["value"] = [*entry["value"], *[0.0] * len(ADDED_TOKENS)]
    return keys


def added_image_token(keys: list[dict[str, Any]]) -> int:
    """The id of `<image>` in a vocabulary `with_added_tokens` extended."""
    (tokens,) = [k["value"] for k in keys if k["key"] == "tokenizer.ggml.tokens"]
    return len(tokens) - len(ADDED_TOKENS) + ADDED_TOKENS.index("<image>")


def write_processor(out: Path, model: Path, shape: Shape) -> int:
    """The tokenizer (SmolLM2's, read from its GGUF, with `ADDED_TOKENS`), the chat template
    and the processor's config; the id of `<image>`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model.parent, gguf_file=model.name)
    base = len(tokenizer)
    tokenizer.add_tokens(ADDED_TOKENS, special_tokens=True)
    if tokenizer.convert_tokens_to_ids(ADDED_TOKENS) != list(range(base, base + len(ADDED_TOKENS))):
        raise SystemExit("the added tokens did not take the ids after the vocabulary, as the GGUF's do")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    processor = {"processor_class": "Idefics3Processor", "image_seq_len": image_tokens(shape)}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    return int(tokenizer.convert_tokens_to_ids("<image>"))


def random_hf_model(
    out: Path, keys: list[dict[str, Any]], image_token_id: int, seed: int, shape: Shape
) -> None:
    """A SmolVLM of the shapes above in transformers' random init (float32), and the
    preprocessor config llama.cpp (and the processor) read the image size and normalisation
    from."""
    import torch
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    values = {k["key"]: k["value"] for k in keys}
    vocab = len(values["tokenizer.ggml.tokens"])
    text = {
        **shape.text,
        "vocab_size": vocab,
        "bos_token_id": values["tokenizer.ggml.bos_token_id"],
        "eos_token_id": values["tokenizer.ggml.eos_token_id"],
        "model_type": "llama",
    }
    config = SmolVLMConfig(
        vision_config=shape.vision,
        text_config=text,
        scale_factor=shape.scale_factor,
        image_token_id=image_token_id,
    )
    torch.manual_seed(seed)
    SmolVLMForConditionalGeneration(config).save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    saved["text_config"]["architectures"] = ["LlamaForCausalLM"]  # what converts the text model
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    preprocessor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "do_resize": True,
        "size": {"longest_edge": shape.image_size},
        "max_image_size": {"longest_edge": shape.image_size},
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
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="the model's sizes")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="the embedded model's tokenizer keys as `benchmarks/gpu/make_gguf.py tokenizer` writes them, "
        "where its package is not installed: the GGUF pair alone (no tokenizer or processor files)",
    )
    args = parser.parse_args(argv)
    if args.tokenizer and args.no_gguf:
        parser.error("--tokenizer makes the GGUF pair only: leave out --no-gguf")
    llama_cpp = llama_cpp_source(args.llama_cpp)
    hf_dir = args.out / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    shape = SHAPES[args.shape]
    if args.tokenizer:
        keys = with_added_tokens(llama_cpp, json.loads(args.tokenizer.read_text()))
        image_token_id = added_image_token(keys)
    else:
        keys = tokenizer_keys(llama_cpp, embedded_model())
        image_token_id = write_processor(hf_dir, embedded_model(), shape)
    random_hf_model(hf_dir, keys, image_token_id, args.seed, shape)
    written = [hf_dir]
    if not args.no_gguf:
        text, mmproj = args.out / "vision-f16.gguf", args.out / "mmproj-vision-f16.gguf"
        convert_text(llama_cpp, hf_dir, keys, text)
        convert_mmproj(llama_cpp, hf_dir, mmproj)
        written += [text, mmproj]
    summary = {
        "written": [str(p) for p in written],
        "image_tokens": image_tokens(shape),
        "image_wrapper": IMAGE_WRAPPER,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
