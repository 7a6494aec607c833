"""scripts/widen_gguf.py: the embedded model placed in a bigger Llama shape computes what it
computes, so a GPU run of the 8B shape answers with the embedded model's text."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmflow.model_files import resolve_model_path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "widen_gguf.py"
PROMPT = (
    "<|im_start|>user\nRewrite this text, changing 'cat' to 'dog': The cat sat on the mat. "
    "The cat was happy and purred all day long in the warm sun.<|im_end|>\n<|im_start|>assistant\n"
    "The dog sat on the mat. The dog was happy"
)


def _script():
    spec = importlib.util.spec_from_file_location("widen_gguf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["widen_gguf"] = module
    spec.loader.exec_module(module)
    return module


def test_each_small_head_reads_its_own_group_and_turns_at_its_own_frequencies():
    widen = _script()
    small = widen.Shape(hidden=576, heads=9, kv_heads=3, ffn=1536, layers=30, vocab=49152)
    big = widen.Shape(hidden=4096, heads=32, kv_heads=8, ffn=14336, layers=32, vocab=49152)
    q_from, q_to = widen.query_rows(small, big)
    kv_from, kv_to = widen.kv_rows(small, big)
    assert len(set(q_to.tolist())) == len(q_from) == 9 * 64
    # small head h of group h // 3 lands in a big head of the same group (4 heads a group)
    groups = {(f // 64 // 3, t // 128 // 4) for f, t in zip(q_from, q_to, strict=True)}
    assert groups == {(0, 0), (1, 1), (2, 2)}
    # rotary pair i (rows 2i, 2i+1 of a head) becomes pair 2i of the 128-wide head
    within_from, within_to = q_from % 64, q_to % 128
    assert (within_to // 2 == 2 * (within_from // 2)).all() and (within_to % 2 == within_from % 2).all()
    assert (kv_to // 128 == kv_from // 64).all()


def test_a_shape_the_model_does_not_fit_is_refused():
    widen = _script()
    small = widen.Shape(hidden=576, heads=9, kv_heads=3, ffn=1536, layers=30, vocab=49152)
    with pytest.raises(SystemExit, match="fewer query heads per group"):
        widen.check(small, widen.Shape(hidden=2048, heads=16, kv_heads=8, ffn=2048, layers=30, vocab=49152))


@pytest.mark.timeout(600)
def test_the_widened_model_predicts_what_the_embedded_model_predicts(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    out = tmp_path / "wide.gguf"
    # wider heads (128: rotary pairs moved, queries scaled), residual, MLP, one more layer
    args = ["--hidden", "1152", "--heads", "9", "--kv-heads", "3", "--ffn", "1792", "--layers", "31"]
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

    def predictions(path: Path) -> np.ndarray:
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, logits_all=True, verbose=False)
        tokens = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
        llm.eval(tokens)
        scores = np.array(llm.scores[: len(tokens)])
        llm.close()
        return scores

    small, wide = predictions(Path(resolve_model_path(None))), predictions(out)
    assert small.shape == wide.shape
    agree = (small.argmax(axis=1) == wide.argmax(axis=1)).mean()
    # f16 against the file's own Q4_1 and Q8_0 kernels: near-ties may part, nothing else
    assert agree >= 0.9, agree
    assert np.corrcoef(small.ravel(), wide.ravel())[0, 1] > 0.99
