"""The Python API: a loaded model that streams answers.

from llmflow import LLM
llm = LLM.load()                      # the embedded SmolLM2 model
for chunk in llm.stream("Hello!", {"max_tokens": 32}):
    print(chunk.text, end="")
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmflow.constraints import Constraint
from llmflow.constraints.compiler import CompiledConstraint, ConstraintCompiler
from llmflow.engines import guess_engine, load_engine
from llmflow.engines.base import Engine
from llmflow.errors import ContextLengthExceeded, InvalidRequest
from llmflow.model_files import resolve_model_path
from llmflow.params import SamplingParams
from llmflow.prompts import (
    ChatTemplate,
    PromptFormat,
    PromptMap,
    RawPrompt,
    parse_messages,
    with_system_prompt,
)
from llmflow.streaming import stream_chunks
from llmflow.types import CancelToken, Chunk, Completion, Message, current_cancel

#: a prompt string (sent as one user message) or a conversation
PromptInput = str | Sequence[Mapping[str, Any]] | Sequence[Message]


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated request, ready for the engine: checked before any stream starts."""

    prompt_ids: list[int]
    params: SamplingParams
    #: what the answer must be (compiled), or None
    constraint: CompiledConstraint | None = None


class LLM:
    """An engine plus the way its conversations become prompts, and default params."""

    def __init__(
        self,
        engine: Engine,
        prompt_format: PromptFormat | None = None,
        default_params: SamplingParams | None = None,
        system_prompt: str | None = None,
    ):
        self.engine = engine
        self.prompt_format = prompt_format or engine.chat_template() or RawPrompt()
        if isinstance(self.prompt_format, ChatTemplate):
            self.prompt_format.validate()
        self.default_params = default_params or SamplingParams()
        self.system_prompt = system_prompt
        self._lock = nullcontext() if engine.concurrent else threading.Lock()
        self._compiler: ConstraintCompiler | None = None
        self._compiler_lock = threading.Lock()

    @classmethod
    def load(
        cls,
        model: str | Path | None = None,
        *,
        engine: str | None = None,
        engine_options: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        prompt_map: Mapping[str, str] | None = None,
        pre_prompt: str = "",
        post_prompt: str = "",
        default_params: Mapping[str, Any] | SamplingParams | None = None,
        system_prompt: str | None = None,
        concurrent: bool = False,
    ) -> LLM:
        """Load a model file or directory (the embedded default when `model` is None).

        `concurrent=True`: generations will come from several threads at once, so when no
        `engine` is named, pick one that decodes them together (for a GGUF file,
        `llama_cpp_batched`) rather than one at a time."""
        path = resolve_model_path(model)
        name = engine or guess_engine(path, concurrent=concurrent)
        loaded = load_engine(name, path, dict(engine_options or {}))
        prompt_format: PromptFormat | None = None
        if prompt_map is not None:
            prompt_format = PromptMap(dict(prompt_map), pre_prompt, post_prompt)
        elif chat_template is not None:
            base = loaded.chat_template()
            prompt_format = ChatTemplate(
                chat_template,
                bos_token=base.bos_token if base else "",
                eos_token=base.eos_token if base else "",
            )
        return cls(loaded, prompt_format, SamplingParams.parse(default_params), system_prompt)

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def render(
        self,
        prompt: PromptInput,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The prompt text the model will continue."""
        if raw:
            if not isinstance(prompt, str):
                raise InvalidRequest.single("prompt", "a raw completion needs a string prompt")
            return prompt
        messages = [Message("user", prompt)] if isinstance(prompt, str) else parse_messages(prompt)
        system = system_prompt if system_prompt is not None else self.system_prompt
        return self.prompt_format.render(with_system_prompt(messages, system), tools=tools)

    def prepare(
        self,
        prompt: PromptInput,
        params: Mapping[str, Any] | SamplingParams | None = None,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        constraint: Constraint | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> PreparedRequest:
        """Validate, compile the output constraint and tokenize; raises before any token is
        generated. `tools` reach the chat template (OpenAI's function tool objects)."""
        merged = params if isinstance(params, SamplingParams) else self.default_params.merged(params)
        compiled = self.compile(constraint) if constraint is not None else None
        text = self.render(prompt, system_prompt=system_prompt, raw=raw, tools=tools)
        prompt_ids = self.engine.tokenize(text)
        if len(prompt_ids) >= self.engine.n_ctx:
            raise ContextLengthExceeded(len(prompt_ids), self.engine.n_ctx)
        if not prompt_ids:
            raise InvalidRequest.single("prompt", "the prompt is empty")
        return PreparedRequest(prompt_ids, merged, compiled)

    def compile(self, constraint: Constraint) -> CompiledConstraint:
        """The constraint compiled for this model (cached per constraint)."""
        with self._compiler_lock:
            if self._compiler is None:
                vocabulary = self.engine.token_vocabulary()
                if vocabulary is None:
                    raise InvalidRequest.single(
                        constraint.field, f"the {self.engine.name} engine cannot constrain its output"
                    )
                self._compiler = ConstraintCompiler(vocabulary)
            compiler = self._compiler
        return compiler.compile(constraint)

    def stream(
        self,
        prompt: PromptInput,
        params: Mapping[str, Any] | SamplingParams | None = None,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        cancel: CancelToken | None = None,
        constraint: Constraint | None = None,
    ) -> Iterator[Chunk]:
        """Chunks as tokens are generated: non-empty text deltas, then one final chunk with
        the finish reason and usage. Bad input raises here, before the iterator is returned.
        With a `constraint`, the text only ever spells what it accepts, and the stream ends
        with `stop` once it is complete (or `length`: a prefix of an accepted text)."""
        request = self.prepare(prompt, params, system_prompt=system_prompt, raw=raw, constraint=constraint)
        return self.stream_prepared(request, cancel)

    def stream_prepared(self, request: PreparedRequest, cancel: CancelToken | None = None) -> Iterator[Chunk]:
        cancel = cancel or current_cancel.get() or CancelToken()
        matcher = request.constraint.start() if request.constraint is not None else None
        with self._lock:
            engine = self.engine
            yield from stream_chunks(
                engine.generate(request.prompt_ids, request.params, cancel, matcher),
                engine.detokenizer(),
                stop=request.params.stop,
                max_tokens=request.params.max_tokens,
                eos_token_ids=engine.eos_token_ids,
                prompt_tokens=len(request.prompt_ids),
                cancel=cancel,
            )

    def generate(
        self,
        prompt: PromptInput,
        params: Mapping[str, Any] | SamplingParams | None = None,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        constraint: Constraint | None = None,
    ) -> Completion:
        """The whole answer at once."""
        return collect(
            self.stream(prompt, params, system_prompt=system_prompt, raw=raw, constraint=constraint)
        )

    def close(self) -> None:
        self.engine.close()


def collect(chunks: Iterator[Chunk]) -> Completion:
    """Join a stream into one completion."""
    parts = []
    for chunk in chunks:
        if chunk.is_final:
            assert chunk.finish_reason is not None and chunk.usage is not None
            return Completion("".join(parts), chunk.finish_reason, chunk.usage)
        parts.append(chunk.text)
    raise RuntimeError("the stream ended without a final chunk")
