"""The Python API: a loaded model that streams answers.

from llmflow import LLM
llm = LLM.load()                      # the embedded SmolLM2 model
for chunk in llm.stream("Hello!", {"max_tokens": 32}):
    print(chunk.text, end="")
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llmflow.constraints import Constraint
from llmflow.constraints.compiler import CompiledConstraint, ConstraintCompiler
from llmflow.constraints.matcher import TokenMatcher
from llmflow.engines import engine_class, guess_engine, load_engine
from llmflow.engines.base import Engine
from llmflow.engines.prompt_cache import common_prefix
from llmflow.errors import ContextLengthExceeded, InvalidParams, InvalidRequest, UnsupportedInput
from llmflow.generation import Generation, GenerationRequest
from llmflow.load_spec import LoadSpec
from llmflow.media.reader import ImageReader
from llmflow.model_files import projector_of, resolve_model_path
from llmflow.observability.timings import RequestTimings
from llmflow.params import SamplingParams
from llmflow.prompts import ChatTemplate, PromptFormat, parse_messages, prompt_format_of, with_system_prompt
from llmflow.registry_prompts import (
    LivePrompt,
    RegistryPrompt,
    is_live,
    is_reference,
    read_prompt,
    system_prompt_source,
)
from llmflow.streaming import stream_chunks
from llmflow.streaming.reasoning import ReasoningSplitter, opens_thinking
from llmflow.types import (
    CancelToken,
    Chunk,
    Completion,
    Image,
    Message,
    PromptReuse,
    TokenLogprob,
    current_cancel,
)

#: "parsed": a reasoning model's thinking apart from its answer; "none": as the model wrote it
ReasoningFormat = Literal["parsed", "none"]

#: a prompt string (sent as one user message) or a conversation
PromptInput = str | Sequence[Mapping[str, Any]] | Sequence[Message]


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated request, ready for the engine: checked before any stream starts."""

    prompt_ids: list[int]
    params: SamplingParams
    #: split a reasoning model's thinking from its answer: None = no; True = the prompt opened
    #: the thinking block; False = the model may open it
    thinking: bool | None = None
    #: what the answer must be (compiled), or None
    constraint: CompiledConstraint | None = None
    #: the registry prompt version the system prompt was read from, or None
    prompt: RegistryPrompt | None = None
    #: the registry prompt version the chat template was read from, or None
    template: RegistryPrompt | None = None
    #: what the chat template puts after the answer whatever the user says next (its tokens):
    #: an engine that keeps the conversation may compute them while it is idle
    next_turn_opening: tuple[int, ...] = ()


class LLM:
    """An engine plus the way its conversations become prompts, and default params."""

    def __init__(
        self,
        engine: Engine,
        prompt_format: PromptFormat | LivePrompt[PromptFormat] | None = None,
        default_params: SamplingParams | None = None,
        system_prompt: str | RegistryPrompt | LivePrompt | None = None,
        template_version: RegistryPrompt | None = None,
    ):
        self.engine = engine
        #: how conversations become prompts: a format, or a registry chat template kept current
        self.format_source = prompt_format or prompt_format_of(engine.template_text())
        if isinstance(self.format_source, ChatTemplate):
            self.format_source.validate()  # a broken template fails now, not at the first request
        self.default_params = default_params or SamplingParams()
        #: the default system prompt: text, or a registry prompt (kept current when live)
        self.system_source = system_prompt
        #: the registry version a chat template read once at load came from, or None
        self.template_version = template_version
        self._lock = nullcontext() if engine.concurrent else threading.Lock()
        self._compiler: ConstraintCompiler | None = None
        self._compiler_lock = threading.Lock()
        #: each chat template's next-turn opening, tokenized once
        self._openings: dict[ChatTemplate, tuple[int, ...]] = {}

    @classmethod
    def load(cls, model: str | Path | None = None, *, concurrent: bool = False, **options: Any) -> LLM:
        """Load a model file or directory (the embedded default when `model` is None).

        `options` are the fields of `LoadSpec` (engine, engine_options, threads, parallel,
        chat_template, prompt_map, pre_prompt, post_prompt, default_params, system_prompt);
        `concurrent`: see `from_spec`."""
        return cls.from_spec(LoadSpec.parse(options), model, concurrent=concurrent)

    @classmethod
    def from_spec(cls, spec: LoadSpec, model: str | Path | None = None, *, concurrent: bool = False) -> LLM:
        """Load `model` (the embedded default when None) as `spec` says. `concurrent=True`:
        generations will come from several threads at once, so when the spec names no engine,
        pick one that decodes them together (for a GGUF file, `llama_cpp_batched`)."""
        path = resolve_model_path(model)
        live_template = spec.chat_template if _is_live_template(spec) else None
        template_version = None
        if is_reference(spec.chat_template):  # read from the registry before any weights
            assert spec.chat_template is not None
            template_version = read_prompt(spec.chat_template, "chat_template")
            spec = spec.model_copy(update={"chat_template": template_version.text})
        system = system_prompt_source(spec.system_prompt, spec.prompt_refresh_s)
        name = spec.engine or guess_engine(path, concurrent=concurrent)
        try:
            engine = load_engine(name, path, with_projector(name, spec.engine_options_for(name), model))
        except BaseException:
            _close_source(system)
            raise
        try:
            own = engine.template_text()
            prompt_format: PromptFormat | LivePrompt[PromptFormat] = spec.prompt_format(own)
            if live_template is not None:  # kept current, each version with the model's special tokens
                parse = functools.partial(prompt_format_of, own)
                prompt_format = LivePrompt(live_template, "chat_template", spec.prompt_refresh_s, parse)
        except BaseException:
            engine.close()
            _close_source(system)
            raise
        fixed = template_version if live_template is None else None
        return cls(engine, prompt_format, spec.sampling_params, system, fixed)

    @property
    def prompt_format(self) -> PromptFormat:
        """How conversations become prompts now (a registry template's current version)."""
        return self._format_now()[0]

    def _format_now(self) -> tuple[PromptFormat, RegistryPrompt | None]:
        """The prompt format now and the registry version it was read from (None: not from the
        registry), of one version."""
        source = self.format_source
        if isinstance(source, LivePrompt):
            version, parsed = source.snapshot()
            return parsed, version
        return source, self.template_version

    @property
    def system_prompt(self) -> str | None:
        """The default system prompt as given: its text, or the registry reference it was read from."""
        source = self.system_source
        if isinstance(source, LivePrompt):
            return source.reference
        return source.reference if isinstance(source, RegistryPrompt) else source

    def system_prompt_for(self, given: str | None) -> tuple[str | None, RegistryPrompt | None]:
        """The system prompt's text for a request that gives `given` (None: the model's default),
        and the registry version it was read from; a request's own reference is read now
        (`PromptNotFound` naming `system_prompt` when it is not there)."""
        source = self.system_source if given is None else given
        if isinstance(source, LivePrompt):
            source = source.current
        elif isinstance(source, str) and is_reference(source):
            source = read_prompt(source, "system_prompt")
        if isinstance(source, RegistryPrompt):
            return source.text, source
        return source, None

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def render(
        self,
        prompt: PromptInput,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        template_vars: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The prompt text the model will continue; `template_vars` and `tools` (OpenAI's
        function tool objects) reach a chat template."""
        system = None if raw else self.system_prompt_for(system_prompt)[0]
        return self._render(prompt, system, raw, template_vars, tools, self.prompt_format)[0]

    def _render(
        self,
        prompt: PromptInput,
        system_prompt: str | None,
        raw: bool,
        template_vars: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        prompt_format: PromptFormat,
    ) -> tuple[str, list[Image]]:
        """The prompt text and its images, in the order the text places them."""
        if raw:
            if not isinstance(prompt, str):
                raise InvalidRequest.single("prompt", "a raw completion needs a string prompt")
            return prompt, []
        messages = [Message("user", prompt)] if isinstance(prompt, str) else parse_messages(prompt)
        messages = self._with_images(messages)
        images = [image for m in messages for image in m.images if isinstance(image, Image)]
        marker = self.engine.image_marker
        if images and marker is not None:
            messages = [_marked(m, marker) for m in messages]
        messages = with_system_prompt(messages, system_prompt)
        if template_vars and isinstance(prompt_format, ChatTemplate):
            return prompt_format.render(messages, tools=tools, variables=template_vars), images
        return prompt_format.render(messages, tools=tools), images

    def _with_images(self, messages: list[Message]) -> list[Message]:
        """The conversation's images read (a server has read them already, with its own limits
        and URL policy), and refused when the model reads no images, naming the first."""
        images = [image for m in messages for image in m.images]
        if not images:
            return messages
        if "image" not in self.engine.input_modalities:
            kinds = ", ".join(self.engine.input_modalities)
            raise UnsupportedInput(
                images[0].field, f"the model {self.model_name!r} takes no images (its inputs: {kinds})"
            )
        return ImageReader().read_now(messages)

    def prepare(
        self,
        prompt: PromptInput,
        params: Mapping[str, Any] | SamplingParams | None = None,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        reasoning_format: ReasoningFormat = "none",
        template_vars: Mapping[str, Any] | None = None,
        constraint: Constraint | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> PreparedRequest:
        """Validate, compile the output constraint and tokenize; raises before any token is
        generated. `reasoning_format` "parsed": a reasoning model's thinking comes as
        `Chunk.reasoning`, apart from its answer (chat prompts only; "none": all of it is text,
        as the model wrote it). `tools` reach the chat template (OpenAI's function tool
        objects)."""
        merged = params if isinstance(params, SamplingParams) else self.default_params.merged(params)
        if merged.logprobs is not None and not self.engine.scores_tokens:
            raise InvalidParams.single("logprobs", f"the {self.engine.name} engine does not return logprobs")
        if merged.lora is not None:
            self.engine.check_adapter(merged.lora)  # an adapter not loaded: refused before any token
        compiled = self.compile(constraint) if constraint is not None else None
        system, source = (None, None) if raw else self.system_prompt_for(system_prompt)
        prompt_format, template = self._format_now()
        text, images = self._render(prompt, system, raw, template_vars, tools, prompt_format)
        prompt_ids = self.engine.tokenize_prompt(text, images)
        if len(prompt_ids) >= self.engine.n_ctx:
            raise ContextLengthExceeded(len(prompt_ids), self.engine.n_ctx)
        if not prompt_ids:
            raise InvalidRequest.single("prompt", "the prompt is empty")
        thinking = opens_thinking(text) if reasoning_format == "parsed" and not raw else None
        opening = () if raw else self._next_turn_opening(prompt_format)
        return PreparedRequest(
            prompt_ids, merged, thinking, compiled, source, None if raw else template, opening
        )

    def _next_turn_opening(self, prompt_format: PromptFormat) -> tuple[int, ...]:
        """The tokens of the chat template's turn boundary, tokenized once per template."""
        if not isinstance(prompt_format, ChatTemplate) or not prompt_format.turn_boundary:
            return ()
        opening = self._openings.get(prompt_format)
        if opening is None:  # two threads may both tokenize it: same result
            tokenize = functools.partial(self.engine.tokenize, add_special=False)
            opening = self._openings[prompt_format] = stable_tokens(prompt_format.turn_boundary, tokenize)
        return opening

    def compile(self, constraint: Constraint) -> CompiledConstraint:
        """The constraint compiled for this model (cached per constraint)."""
        compiler = self._constraint_compiler()
        if compiler is None:
            raise InvalidRequest.single(
                constraint.field, f"the {self.engine.name} engine cannot constrain its output"
            )
        return compiler.compile(constraint)

    def control_token(self, text: str) -> int | None:
        """The id of the control token spelled `text` in the model's vocabulary (a tool-call
        marker such as `<|python_tag|>`); None when it has none or the engine cannot constrain."""
        compiler = self._constraint_compiler()
        return None if compiler is None else compiler.vocabulary.control_token(text)

    def _constraint_compiler(self) -> ConstraintCompiler | None:
        with self._compiler_lock:
            if self._compiler is None:
                vocabulary = self.engine.token_vocabulary()
                if vocabulary is None:
                    return None
                self._compiler = ConstraintCompiler(vocabulary)
            return self._compiler

    def stream(
        self,
        prompt: PromptInput,
        params: Mapping[str, Any] | SamplingParams | None = None,
        *,
        system_prompt: str | None = None,
        raw: bool = False,
        cancel: CancelToken | None = None,
        reasoning_format: ReasoningFormat = "none",
        constraint: Constraint | None = None,
    ) -> Iterator[Chunk]:
        """Chunks as tokens are generated: non-empty text deltas, then one final chunk with
        the finish reason and usage. Bad input raises here, before the iterator is returned.
        `reasoning_format="parsed"` sends a reasoning model's thinking as `Chunk.reasoning`.
        With a `constraint`, the text only ever spells what it accepts, and the stream ends
        with `stop` once it is complete (or `length`: a prefix of an accepted text)."""
        request = self.prepare(
            prompt,
            params,
            system_prompt=system_prompt,
            raw=raw,
            reasoning_format=reasoning_format,
            constraint=constraint,
        )
        return self.stream_prepared(request, cancel)

    def stream_prepared(self, request: PreparedRequest, cancel: CancelToken | None = None) -> Iterator[Chunk]:
        cancel = cancel or current_cancel.get() or CancelToken()
        matcher = request.constraint.start() if request.constraint is not None else None
        with self.exclusive():
            reuse = PromptReuse()
            tokens = self.engine.generate(
                request.prompt_ids,
                request.params,
                cancel,
                matcher,
                reuse,
                next_turn_opening=request.next_turn_opening,
            )
            yield from self.chunks_of(tokens, request, cancel, reuse=reuse)

    def start(
        self,
        request: GenerationRequest,
        cancel: CancelToken | None = None,
        timings: RequestTimings | None = None,
    ) -> Generation:
        """The typed events of `request`'s generation (see `llmflow.generation`), ending with its
        record; `timings`: the request's clock readings, which the record carries."""
        cancel = cancel or current_cancel.get() or CancelToken()
        return Generation(self, request, cancel, timings or RequestTimings())

    def exclusive(self) -> AbstractContextManager[Any]:
        """Held while a generation runs: a lock for an engine that decodes one at a time."""
        return self._lock

    def matchers(self, request: PreparedRequest, n: int) -> list[TokenMatcher | None]:
        """A fresh matcher of the request's constraint for each of `n` choices (each holds its
        own choice's state), or Nones."""
        if request.constraint is None:
            return [None] * n
        return [request.constraint.start() for _ in range(n)]

    def chunks_of(
        self,
        tokens: Iterator[int],
        request: PreparedRequest,
        cancel: CancelToken,
        params: SamplingParams | None = None,
        reuse: PromptReuse | None = None,
    ) -> Iterator[Chunk]:
        """The streaming core over an engine's `tokens` for `request` (`params`: one choice's,
        when they differ from the request's; `reuse`: where the engine reports cached tokens)."""
        engine = self.engine
        params = params or request.params
        return stream_chunks(
            tokens,
            engine.detokenizer(),
            stop=params.stop,
            max_tokens=params.max_tokens,
            eos_token_ids=engine.eos_token_ids,
            prompt_tokens=len(request.prompt_ids),
            cancel=cancel,
            reasoning=None if request.thinking is None else ReasoningSplitter(thinking=request.thinking),
            logprobs=None if params.logprobs is None else engine.token_piece,
            reuse=reuse,
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

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of `text` as llama.cpp's /tokenize gives them: nothing added unless
        `add_special` (BOS, when the model wants one)."""
        return self.engine.tokenize(text, add_special=add_special, parse_special=parse_special)

    def token_pieces(self, token_ids: Sequence[int], *, field: str = "tokens") -> list[bytes]:
        """Each token's bytes (special tokens as their text)."""
        check_token_ids(token_ids, self.engine.n_vocab, field)
        return [self.engine.token_piece(t) for t in token_ids]

    def detokenize(self, token_ids: Sequence[int], *, field: str = "tokens") -> str:
        """The text of `token_ids`; an id the model does not have is an `InvalidRequest`."""
        check_token_ids(token_ids, self.engine.n_vocab, field)
        return self.engine.detokenize(token_ids)

    def close(self) -> None:
        _close_source(self.system_source)
        _close_source(self.format_source)
        self.engine.close()


def with_projector(engine: str, options: dict[str, Any], model: str | Path | None) -> dict[str, Any]:
    """`options` with the projector `model` brings along (a Hub vision model's) as the engine's
    projector option, unless the options name one: such a model reads images as it comes."""
    option = engine_class(engine).projector_option
    if option is None or option in options:
        return options
    projector = projector_of(model)
    return options if projector is None else {**options, option: str(projector)}


def _is_live_template(spec: LoadSpec) -> bool:
    """The spec's chat template is a registry alias (or latest version) to keep current; a prompt
    map, when given, is the format instead."""
    return spec.prompt_map is None and spec.chat_template is not None and is_live(spec.chat_template)


def _close_source(source: object) -> None:
    if isinstance(source, LivePrompt):
        source.close()


def check_token_ids(token_ids: Sequence[int], n_vocab: int, field: str) -> None:
    for i, t in enumerate(token_ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
            raise InvalidRequest.single(
                f"{field}[{i}]", f"{t!r} is not a token id of this model (0..{n_vocab - 1})"
            )


def collect(chunks: Iterator[Chunk]) -> Completion:
    """Join a stream into one completion."""
    parts = []
    thinking = []
    logprobs: list[TokenLogprob] = []
    for chunk in chunks:
        if chunk.is_final:
            assert chunk.finish_reason is not None and chunk.usage is not None
            return Completion(
                "".join(parts),
                chunk.finish_reason,
                chunk.usage,
                "".join(thinking),
                tuple(logprobs),
                chunk.stop_sequence,
            )
        parts.append(chunk.text)
        if chunk.reasoning:
            thinking.append(chunk.reasoning)
        logprobs += chunk.logprobs
    raise RuntimeError("the stream ended without a final chunk")


def _marked(message: Message, marker: str) -> Message:
    """`message` as plain text, each image written as the engine's `marker` where it stood."""
    if not message.parts:
        return message
    text = "".join(p if isinstance(p, str) else marker for p in message.parts)
    return dataclasses.replace(message, content=text, parts=())


def stable_tokens(text: str, tokenize: Callable[[str], list[int]]) -> tuple[int, ...]:
    """`text`'s tokens as they stand between two other texts, of which they do not depend: the
    ones it gives alone and between a sentence and a word (a tokenizer that merged it with what
    comes before gives none). A sample, not a proof: whoever uses them reuses only what matches."""
    before, after = "Sure, done.", "Thanks"
    head, alone = tokenize(before), tokenize(text)
    between = tokenize(before + text + after)
    if between[: len(head)] != head:
        return ()
    return tuple(alone[: common_prefix(alone, between[len(head) :])])
