"""Workloads: synthetic prompts of a given token length, or prompts from a JSONL dataset.

Synthetic prompts are random common words followed by an instruction to write at length,
each request different (so no prompt cache helps) and reproducible from the seed and the
request's key, so two servers benchmarked separately get the same prompts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from llmflow.bench.records import RequestSpec
from llmflow.bench.tokens import TokenCounter
from llmflow.errors import InvalidRequest

INSTRUCTION = "\nWrite a long story that uses all of the words above."

# Short, frequent English words: one token each in common BPE vocabularies.
# fmt: off
_WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "name",
    "team", "minute", "idea", "kid", "body", "back", "parent", "face", "others", "level", "office",
    "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning",
    "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education", "foot", "boy",
    "age", "policy", "music", "market", "sense", "nation", "plan", "college", "interest", "death",
    "experience", "effect", "class", "control", "field", "development", "role", "effort", "rate",
    "heart", "drug", "show", "leader", "light", "voice", "wife", "police", "mind", "price", "report",
    "decision", "son", "view", "relationship", "town", "road", "arm", "difference", "value", "building",
    "action", "model", "season", "society", "tax", "director", "position", "player", "record", "paper",
    "space", "ground", "form", "event", "official", "matter", "center", "couple", "site", "project",
    "activity", "star", "table", "need", "court", "oil", "situation", "cost", "industry", "figure",
    "street", "image", "phone", "data", "picture", "practice", "piece", "land", "product", "doctor",
    "wall", "patient", "worker", "news", "test", "movie", "north", "love", "support", "technology",
    "step", "baby", "computer", "type", "attention", "film", "tree", "source", "bird",
)
# fmt: on


def synthetic_requests(
    count: int,
    *,
    prompt_tokens: int,
    max_tokens: int,
    seed: int,
    key: str,
    counter: TokenCounter | None,
) -> list[RequestSpec]:
    """`count` prompts of `prompt_tokens` tokens (as close as the words allow, never more when
    a tokenizer is given; about one token per word without one)."""
    if prompt_tokens < 1:
        raise InvalidRequest.single("prompt_tokens", "must be at least 1")
    specs = []
    for index in range(count):
        words = random.Random(f"{seed}:{key}:{index}").choices(_WORDS, k=prompt_tokens)
        prompt, measured = _fit(words, prompt_tokens, counter)
        specs.append(RequestSpec(index, prompt=prompt, max_tokens=max_tokens, prompt_tokens=measured))
    return specs


def _fit(words: list[str], target: int, counter: TokenCounter | None) -> tuple[str, int | None]:
    """The longest prefix of `words`, plus the instruction when it fits, within `target` tokens."""
    if counter is None:
        keep = target - len(INSTRUCTION.split())
        return (_prompt(words, keep, INSTRUCTION), None) if keep > 0 else (_prompt(words, target, ""), None)
    suffix = INSTRUCTION if counter.count(_prompt(words, 1, INSTRUCTION)) <= target else ""
    low, high = 1, len(words)  # binary search: the token count grows with the word count
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(_prompt(words, middle, suffix)) <= target:
            low = middle
        else:
            high = middle - 1
    prompt = _prompt(words, low, suffix)
    return prompt, counter.count(prompt)


def _prompt(words: list[str], n: int, suffix: str) -> str:
    return " ".join(words[:n]) + suffix


def dataset_requests(path: Path, count: int, *, max_tokens: int) -> list[RequestSpec]:
    """`count` requests from a JSONL file, cycling through its lines. Each line is an object
    with `prompt` (a string) or `messages` (a chat), and optionally its own `max_tokens`."""
    rows = load_dataset(path)
    return [_spec(index, rows[index % len(rows)], max_tokens) for index in range(count)]


def load_dataset(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidRequest.single("dataset", f"cannot read {str(path)!r}: {exc.strerror}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            rows.append(_parse_row(path, number, line))
    if not rows:
        raise InvalidRequest.single("dataset", f"{str(path)!r} has no requests")
    return rows


def _parse_row(path: Path, number: int, line: str) -> dict[str, Any]:
    where = f"{path.name} line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRequest.single("dataset", f"{where} is not JSON: {exc.msg}") from None
    if not isinstance(row, dict):
        raise InvalidRequest.single("dataset", f"{where} is not a JSON object")
    prompt, messages = row.get("prompt"), row.get("messages")
    if isinstance(prompt, str) and prompt:
        return row
    if isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
        return row
    raise InvalidRequest.single(
        "dataset", f'{where} needs "prompt" (a non-empty string) or "messages" (a list of role/content)'
    )


def _is_message(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str)
    )


def _spec(index: int, row: dict[str, Any], max_tokens: int) -> RequestSpec:
    own = row.get("max_tokens")
    tokens = own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else max_tokens
    if isinstance(row.get("prompt"), str) and row["prompt"]:
        return RequestSpec(index, prompt=row["prompt"], max_tokens=tokens)
    messages = tuple({"role": m["role"], "content": m["content"]} for m in row["messages"])
    return RequestSpec(index, messages=messages, max_tokens=tokens)
