"""The two function tools the tool-calling tests offer the model, in both wire shapes: chat's
(`{"type": "function", "function": {...}}`) and the Responses API's flat one."""

from __future__ import annotations

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
#: bounded, so that a small model cannot wander in the timezone's name until max_tokens
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "pattern": "^[A-Z][a-z]{1,12}/[A-Z][a-z]{1,12}$"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
#: function name -> its parameters' schema
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
