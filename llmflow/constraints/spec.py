"""What a request asks the answer to be: a JSON Schema, any JSON object, a regex, one of a list of
strings, or a grammar. Plain data (standard library only), so that every layer can carry it; it
is compiled against a model's vocabulary by `llmflow.constraints.compiler`."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmflow.errors import InvalidRequest


class ConstraintKind(str, enum.Enum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    CHOICE = "choice"
    GRAMMAR = "grammar"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One constraint. `source` is canonical text (a schema as sorted JSON), so equal constraints
    compare equal and share one compiled form; `field` names where the request gave it, for
    errors, and takes no part in equality."""

    kind: ConstraintKind
    source: str
    field: str = field(default="constraint", compare=False)

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any] | str | bool, field: str = "json_schema") -> Constraint:
        """A JSON Schema, as an object or as its JSON text."""
        value = _json_value(schema, field) if isinstance(schema, str) else schema
        if not isinstance(value, (Mapping, bool)):
            raise InvalidRequest.single(field, "must be a JSON Schema (an object)")
        return cls(ConstraintKind.JSON_SCHEMA, json.dumps(value, sort_keys=True), field)

    @classmethod
    def json_object(cls, field: str = "response_format") -> Constraint:
        """Any JSON object (OpenAI's `json_object` response format)."""
        return cls(ConstraintKind.JSON_OBJECT, '{"type": "object"}', field)

    @classmethod
    def regex(cls, pattern: str, field: str = "regex") -> Constraint:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidRequest.single(field, "must be a non-empty regular expression")
        return cls(ConstraintKind.REGEX, pattern, field)

    @classmethod
    def choice(cls, choices: Sequence[str] | str, field: str = "choice") -> Constraint:
        """Exactly one of `choices` (a list of strings, or its JSON text)."""
        value = _json_value(choices, field) if isinstance(choices, str) else choices
        if (
            not isinstance(value, Sequence)
            or isinstance(value, str)
            or not value
            or not all(isinstance(c, str) and c for c in value)
        ):
            raise InvalidRequest.single(field, "must be a non-empty list of non-empty strings")
        return cls(ConstraintKind.CHOICE, json.dumps(list(dict.fromkeys(value))), field)

    @classmethod
    def grammar(cls, grammar: str, field: str = "grammar") -> Constraint:
        """A grammar in Lark syntax (llguidance's dialect) or GBNF (llama.cpp's, with `::=`)."""
        if not isinstance(grammar, str) or not grammar.strip():
            raise InvalidRequest.single(field, "must be a non-empty grammar (Lark or GBNF)")
        return cls(ConstraintKind.GRAMMAR, grammar, field)

    @property
    def is_json(self) -> bool:
        return self.kind in (ConstraintKind.JSON_SCHEMA, ConstraintKind.JSON_OBJECT)


def _json_value(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequest.single(field, f"is not valid JSON: {exc}") from None
