"""JSON Schemas the constraint tests run: objects, arrays, enums, nesting, bounded numbers,
patterns, anyOf and $ref; each small enough for a short answer."""

from __future__ import annotations

from typing import Any

from llmflow.constraints import Constraint
from llmflow.errors import EngineFailed

SCHEMAS: dict[str, dict[str, Any]] = {
    "object": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 4},
    "enum": {"enum": ["red", "green", "blue"]},
    "nested": {
        "type": "object",
        "properties": {
            "city": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 10}, "big": {"type": "boolean"}},
                "required": ["name", "big"],
                "additionalProperties": False,
            }
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "bounded_number": {
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["score"],
        "additionalProperties": False,
    },
    "pattern": {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
        "required": ["code"],
        "additionalProperties": False,
    },
    "any_of": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 9}, {"enum": ["none"]}]},
    "ref": {
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"],
        "additionalProperties": False,
    },
}  # fmt: skip

PROMPT = "Answer in JSON only. Describe a person, a city or a number."


def accepts_prefix(llm: Any, constraint: Constraint, text: str) -> bool:
    """Whether `text` (retokenized) is a prefix of something the constraint accepts."""
    matcher = llm.compile(constraint).start()
    try:
        for token in llm.engine.token_vocabulary().encode(text.encode()):
            matcher.advance(token)
    except EngineFailed:
        return False
    return True


def assert_valid_answer(llm, schema: dict[str, Any], done) -> None:
    """A finished answer validates against `schema`; one cut at max_tokens is an accepted prefix."""
    import json

    import jsonschema

    from llmflow import FinishReason

    if done.finish_reason is FinishReason.STOP:
        jsonschema.validate(json.loads(done.text), schema)
        return
    matcher = llm.compile(Constraint.json_schema(schema)).start()
    for token in llm.engine.token_vocabulary().encode(done.text.encode()):
        matcher.advance(token)  # raises if the text is not an accepted prefix
