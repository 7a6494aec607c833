"""What a trace keeps of a request's images: not their bytes. A request's inputs are recorded in
its MLflow trace as given, and an inline image may be megabytes of base64; a trace keeps its
data URI's head (or Anthropic's source type) and how long it was."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: inline image text up to this length is kept as it is
KEEP_CHARS = 256


def without_image_data(value: Any) -> Any:
    """`value` (a request body, as JSON values) with long inline images shortened."""
    if isinstance(value, str):
        if value.startswith("data:") and len(value) > KEEP_CHARS:
            head = value[: value.find(",") + 1] if "," in value[:KEEP_CHARS] else "data:"
            return f"{head}<{len(value)} characters>"
        return value
    if isinstance(value, Mapping):
        data = value.get("data")
        if value.get("type") == "base64" and isinstance(data, str) and len(data) > KEEP_CHARS:
            return {**value, "data": f"<{len(data)} characters of base64>"}
        return {key: without_image_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_image_data(item) for item in value]
    return value
