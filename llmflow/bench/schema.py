"""The JSON results schema (JSON Schema 2020-12). Stable: a field is only ever added together
with a new `schema_version`, and the tests pin both.

Units: every duration is in seconds (`*_s`); throughputs are per second.

- `ttft_s`: from sending the request to the first chunk that carried text.
- `itl_s`: the gaps between consecutive text chunks, one per chunk after the first (as vLLM
  measures it). A chunk may carry more than one token (a character spanning tokens, text held
  back by a stop string), so a request has at most `output_tokens - 1` gaps.
- `tpot_s`: (e2e - ttft) / (output_tokens - 1), the time per output token after the first.
- `request_rate`: null for a closed-loop level, "inf" when every request is sent at once.
- `e2e_s`: from sending the request to the end of its stream.
- `output_tokens`: `usage.completion_tokens` when the server sent it, else the answer's text
  re-tokenized with the model's tokenizer, else the number of text chunks; the
  `output_tokens_source` of each request says which.
- `resent`: the server closed the connection without answering (a kept-alive connection it had
  dropped), so the request was sent once more; its times count from the first send.
  (Version 2 added it, per request and as a count in each summary.)
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STRING_OR_NULL = {"type": ["string", "null"]}


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these properties, all required."""
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


_DISTRIBUTION = {
    "oneOf": [
        {"type": "null"},
        _closed({name: {"type": "number"} for name in ("mean", "median", "p90", "p99")}),
    ]
}

_ERROR = {
    "oneOf": [
        {"type": "null"},
        _closed(
            {
                "kind": {
                    "enum": [
                        "invalid_url",
                        "connect",
                        "timeout",
                        "http_status",
                        "not_streaming",
                        "malformed_sse",
                        "stream_error",
                        "incomplete",
                        "engine",
                    ]
                },
                "message": {"type": "string"},
            }
        ),
    ]
}

REQUEST = _closed(
    {
        "index": {"type": "integer", "minimum": 0},
        "ok": {"type": "boolean"},
        "start_s": {"type": "number"},
        "ttft_s": _NUMBER_OR_NULL,
        "e2e_s": _NUMBER_OR_NULL,
        "tpot_s": _NUMBER_OR_NULL,
        "itl_s": {"type": "array", "items": {"type": "number"}},
        "chunks": {"type": "integer", "minimum": 0},
        "output_tokens": _INT_OR_NULL,
        "output_tokens_source": {"enum": ["usage", "tokenizer", "chunks", None]},
        "usage_output_tokens": _INT_OR_NULL,
        "tokenizer_output_tokens": _INT_OR_NULL,
        "prompt_tokens": _INT_OR_NULL,
        "finish_reason": _STRING_OR_NULL,
        "error": _ERROR,
        "resent": {"type": "boolean"},
    }
)

SUMMARY = _closed(
    {
        "completed": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0},
        "resent": {"type": "integer", "minimum": 0},
        "duration_s": {"type": "number"},
        "request_throughput": _NUMBER_OR_NULL,
        "output_throughput": _NUMBER_OR_NULL,
        "total_output_tokens": {"type": "integer", "minimum": 0},
        "total_prompt_tokens": _INT_OR_NULL,
        "output_tokens_sources": {"type": "object", "additionalProperties": {"type": "integer"}},
        "errors": {"type": "object", "additionalProperties": {"type": "integer"}},
        "ttft_s": _DISTRIBUTION,
        "itl_s": _DISTRIBUTION,
        "tpot_s": _DISTRIBUTION,
        "e2e_s": _DISTRIBUTION,
    }
)

LEVEL = _closed(
    {
        "label": {"type": "string"},
        "concurrency": _INT_OR_NULL,
        "request_rate": {"oneOf": [{"type": "number"}, {"type": "null"}, {"const": "inf"}]},
        "summary": SUMMARY,
        "requests": {"type": "array", "items": REQUEST},
    }
)

RESULTS = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "llmflow bench results",
    **_closed(
        {
            "schema_version": {"const": SCHEMA_VERSION},
            "tool": {"const": "llmflow bench"},
            "llmflow_version": {"type": "string"},
            "started_at": {"type": "string"},
            "target": _closed(
                {
                    "mode": {"enum": ["http", "in_process"]},
                    "url": _STRING_OR_NULL,
                    "api": {"enum": ["chat", "completions"]},
                    "model": _STRING_OR_NULL,
                }
            ),
            "config": _closed(
                {
                    "requests": {"type": "array", "items": {"type": "integer"}},
                    "prompt_tokens": _INT_OR_NULL,
                    "max_tokens": {"type": "integer"},
                    "dataset": _STRING_OR_NULL,
                    "temperature": {"type": "number"},
                    "seed": {"type": "integer"},
                    "tokenizer": _STRING_OR_NULL,
                    "request_usage": {"type": "boolean"},
                    "warmup": {"type": "boolean"},
                    "timeout_s": _NUMBER_OR_NULL,
                }
            ),
            "notes": {"type": "array", "items": {"type": "string"}},
            "aborted": _STRING_OR_NULL,
            "warmup": {"oneOf": [{"type": "null"}, REQUEST]},
            "levels": {"type": "array", "items": LEVEL},
        }
    ),
}
