"""Counting tokens with the model's own tokenizer: for synthetic prompts of an exact length,
and for answers when the server does not report usage."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from llmflow.bench.records import RequestRecord
from llmflow.model_files import DEFAULT_MODEL_NAME

#: `--tokenizer` value that means the embedded model
EMBEDDED = "embedded"


class TokenCounter:
    """Counts the tokens of a text, without the BOS token a tokenizer may add."""

    def __init__(self, tokenize: Callable[[str], list[int]], name: str):
        self._tokenize = tokenize
        self.name = name
        self._overhead = len(tokenize(""))

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(0, len(self._tokenize(text)) - self._overhead)

    def fill(self, records: Iterable[RequestRecord]) -> None:
        """Count every answer's tokens (after the run, so counting never delays a stream)."""
        for record in records:
            if record.arrivals or record.ok:
                record.tokenizer_output_tokens = self.count(record.text)

    @classmethod
    def from_llm(cls, llm) -> TokenCounter:  # llm: llmflow.LLM
        return cls(llm.engine.tokenize, llm.model_name)

    @classmethod
    def load(cls, model: str | Path) -> TokenCounter:
        """The tokenizer of a GGUF file or model directory (`embedded`: the embedded model).

        A llama.cpp model is loaded with a tiny context and on the CPU: only its vocabulary is used."""
        from llmflow.engines import guess_engine
        from llmflow.llm import LLM
        from llmflow.model_files import resolve_model_path

        path = resolve_model_path(None if str(model) == EMBEDDED else model)
        llama_cpp = guess_engine(path) == "llama_cpp"
        options = {"n_ctx": 16, "n_threads": 1, "n_gpu_layers": 0} if llama_cpp else {}
        return cls.from_llm(LLM.load(path, engine_options=options))


def guess_tokenizer(model_id: str | None) -> str | None:
    """A tokenizer for a served model, when its name says which: a GGUF path that exists here
    (llama-cpp-python's server names models by path) or the embedded model's name."""
    if not model_id:
        return None
    if model_id.endswith(".gguf") and Path(model_id).is_file():
        return model_id
    if model_id.lower().startswith(DEFAULT_MODEL_NAME.lower()):
        return EMBEDDED
    return None
