"""A Spark type for the answers of a JSON Schema, so an extraction job returns typed columns:
objects as structs, arrays as arrays, strings, integers, numbers and booleans as such. What has
no single Spark type (anyOf, a mixed enum, an untyped value) stays JSON text in a string."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 16


def spark_type(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    from pyspark.sql import types as T

    root = root if root is not None else schema
    schema = _resolved(schema, root)
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return T.StringType()
    kind = schema.get("type")
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return _scalar_type({type(v) for v in values if v is not None}) or T.StringType()
    if kind == "object" or (kind is None and "properties" in schema):
        required = set(schema.get("required", []))
        return T.StructType(
            [
                T.StructField(name, spark_type(sub, root, depth + 1), nullable=name not in required)
                for name, sub in (schema.get("properties") or {}).items()
            ]
        )
    if kind == "array":
        return T.ArrayType(spark_type(schema.get("items", {}), root, depth + 1))
    simple = {
        "string": T.StringType(),
        "integer": T.LongType(),
        "number": T.DoubleType(),
        "boolean": T.BooleanType(),
    }
    return simple.get(kind, T.StringType()) if isinstance(kind, str) else T.StringType()


def _scalar_type(kinds: set[type]) -> Any:
    from pyspark.sql import types as T

    if kinds == {str}:
        return T.StringType()
    if kinds == {bool}:
        return T.BooleanType()
    if kinds and kinds <= {int}:
        return T.LongType()
    if kinds and kinds <= {int, float}:
        return T.DoubleType()
    return None


def _resolved(schema: Any, root: Mapping[str, Any]) -> Any:
    """A local `$ref` (#/$defs/x, #/definitions/x) replaced by what it points to."""
    if not isinstance(schema, Mapping) or "$ref" not in schema:
        return schema
    ref = schema["$ref"]
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return {}
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part, {}) if isinstance(target, Mapping) else {}
    return target
