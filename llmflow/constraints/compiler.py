"""Constraints compiled against one model's vocabulary with llguidance (see docs/structured-output.md
for why this library): one `ConstraintCompiler` per loaded engine, a cache of compiled
constraints, and a fresh `TokenMatcher` per generation."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

from llmflow.constraints.matcher import TokenMatcher
from llmflow.constraints.spec import Constraint, ConstraintKind
from llmflow.constraints.vocabulary import TokenVocabulary
from llmflow.errors import EngineUnavailable, InvalidConstraint

#: compact JSON with a space after ':' and ',' (as `json.dumps` writes it): no free whitespace, which
#: a small model would fill until max_tokens
JSON_OPTIONS = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
CACHE_SIZE = 256
#: a grammar whose first rule is written `name ::= ...` is GBNF; otherwise it is Lark
GBNF_RULE = re.compile(r"\A(?:\s*#[^\n]*\n)*\s*[A-Za-z][\w-]*\s*::=")


class CompiledConstraint:
    """A constraint ready to run: the grammar built once, copied for each generation."""

    __slots__ = ("constraint", "_prototype", "_vocabulary")

    def __init__(self, constraint: Constraint, prototype: Any, vocabulary: TokenVocabulary):
        self.constraint = constraint
        self._prototype = prototype
        self._vocabulary = vocabulary

    def start(self) -> TokenMatcher:
        """The state of one generation (each sequence of a batch has its own)."""
        return TokenMatcher(self._prototype.deep_copy(), self._vocabulary)


class ConstraintCompiler:
    """Compiles constraints for one vocabulary; thread-safe. The llguidance tokenizer is built at
    the first constrained request, so unconstrained use costs nothing."""

    def __init__(self, vocabulary: TokenVocabulary, cache_size: int = CACHE_SIZE, *, tokenizer: Any = None):
        """`tokenizer`: llguidance's tokenizer of this vocabulary (`lltokenizer`), when one is built
        already; shared by compilers of one vocabulary, it is built once (benchmarks time a cold
        compile so, without the tokenizer's build)."""
        self.vocabulary = vocabulary
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._tokenizer: Any = tokenizer
        self._cache: OrderedDict[Constraint, CompiledConstraint] = OrderedDict()

    def compile(self, constraint: Constraint) -> CompiledConstraint:
        """The compiled form, from the cache when an equal constraint was compiled before. A
        constraint llguidance refuses raises `InvalidConstraint` naming its field and the reason."""
        with self._lock:
            hit = self._cache.get(constraint)
            if hit is not None:
                self._cache.move_to_end(constraint)
                return hit
            tokenizer = self._lltokenizer()
        llguidance = _import_llguidance()
        grammar = grammar_of(constraint)
        prototype = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if prototype.is_error():
            raise InvalidConstraint(constraint.field, _reason(prototype.get_error()))
        compiled = CompiledConstraint(constraint, prototype, self.vocabulary)
        with self._lock:
            self._cache[constraint] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled

    def _lltokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = lltokenizer(self.vocabulary)
        return self._tokenizer


def embedded_json(schema: dict) -> str:
    """A JSON Schema to embed in a Lark grammar (`%json {...}`), with the JSON options above."""
    return json.dumps({**schema, "x-guidance": JSON_OPTIONS})


def grammar_of(constraint: Constraint) -> str:
    """llguidance's grammar text for a constraint."""
    from llguidance import LLMatcher

    kind, source = constraint.kind, constraint.source
    try:
        if kind in (ConstraintKind.JSON_SCHEMA, ConstraintKind.JSON_OBJECT):
            return LLMatcher.grammar_from_json_schema(source, defaults=JSON_OPTIONS)
        if kind is ConstraintKind.REGEX:
            return LLMatcher.grammar_from_regex(source)
        if kind is ConstraintKind.CHOICE:
            choices = json.loads(source)
            return LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in choices))
        if GBNF_RULE.match(source):  # GBNF, as llama.cpp takes it
            from llguidance.gbnf_to_lark import gbnf_to_lark

            return LLMatcher.grammar_from_lark(gbnf_to_lark(source))
        return LLMatcher.grammar_from_lark(source)
    except (ValueError, KeyError, AssertionError) as exc:  # what llguidance's converters raise
        raise InvalidConstraint(constraint.field, str(exc) or type(exc).__name__) from None


def lltokenizer(vocabulary: TokenVocabulary) -> Any:
    """llguidance's tokenizer over `vocabulary`: special tokens marked with its 0xFF prefix."""
    llguidance = _import_llguidance()
    from llguidance._tokenizer import TokenizerWrapper

    return llguidance.LLTokenizer(
        TokenizerWrapper(_WrappedVocabulary(vocabulary)),
        eos_token=sorted(vocabulary.eos_token_ids),
    )


class _WrappedVocabulary:
    """The shape llguidance's `TokenizerWrapper` reads."""

    def __init__(self, vocabulary: TokenVocabulary):
        special = vocabulary.special_ids
        self.tokens = [b"\xff" + t if i in special else t for i, t in enumerate(vocabulary.tokens)]
        self.special_token_ids = sorted(special)
        self.eos_token_id = min(vocabulary.eos_token_ids) if vocabulary.eos_token_ids else None
        self.bos_token_id = None
        self._encode = vocabulary.encode

    def __call__(self, text: bytes | str) -> list[int]:
        return self._encode(text.encode("utf-8") if isinstance(text, str) else text)


def _reason(error: str) -> str:
    """llguidance's message on one line, at most 500 characters."""
    text = " ".join(line.strip() for line in error.strip().splitlines() if line.strip())
    return (text or "cannot be compiled")[:500]


def _import_llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:  # a core dependency; only a broken environment lacks it
        raise EngineUnavailable(f"structured output needs llguidance: {exc}") from None
    return llguidance
