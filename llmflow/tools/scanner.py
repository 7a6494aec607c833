"""Finds function calls in a model's text as it streams: JSON objects with a `name` and an
`arguments` (or `parameters`) object, at a given nesting depth. The arguments are handed on as
the raw text the model wrote, piece by piece, so a streamed call joined equals the whole call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ARGUMENT_KEYS = frozenset({"arguments", "parameters"})


@dataclass
class CallDelta:
    """New text of call `index`: its `name` once it is known (first delta), then arguments."""

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass
class _Call:
    index: int
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    #: arguments held back until the name is known (a model that writes them first)
    held: list[str] = field(default_factory=list)
    announced: bool = False
    complete: bool = False


class CallScanner:
    """Feed text, get `CallDelta`s. `call_depth`: how many containers enclose a call object,
    itself included ({"tool_calls": [{...}]}: 3; [{...}]: 2; {...}: 1). Text outside JSON
    (markers such as <tool_call>) is skipped."""

    def __init__(self, call_depth: int):
        self._call_depth = call_depth
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._string: list[str] | None = None  # a key or a name being read
        self._expect = "key"
        self._key = ""
        self._capturing = False  # inside an arguments value
        self._call: _Call | None = None
        self.calls: list[_Call] = []

    def feed(self, text: str) -> list[CallDelta]:
        out: list[CallDelta] = []
        for ch in text:
            if self._capturing:
                self._capture(ch, out)
            else:
                self._scan(ch, out)
        return _merged(out)

    @property
    def complete_calls(self) -> list[tuple[str, str]]:
        """(name, arguments) of every call that closed with a name and arguments."""
        return [(c.name, "".join(c.arguments)) for c in self.calls if c.complete and c.name is not None]

    def _capture(self, ch: str, out: list[CallDelta]) -> None:
        call = self._call
        assert call is not None
        (call.arguments if call.announced else call.held).append(ch)
        if call.announced:
            out.append(CallDelta(call.index, arguments=ch))
        if self._string_char(ch):
            return
        if ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == self._call_depth:
                self._capturing = False
                self._expect = "after"

    def _string_char(self, ch: str) -> bool:
        """Track strings; True when `ch` is part of one (its quotes included)."""
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
            return True
        if ch == '"':
            self._in_string = True
            return True
        return False

    def _scan(self, ch: str, out: list[CallDelta]) -> None:
        at_call = self._call is not None and self._depth == self._call_depth
        was_in_string = self._in_string
        if self._string_char(ch):
            self._string_step(ch, was_in_string, at_call, out)
            return
        if ch in "{[":
            if at_call and self._expect == "value" and self._key in ARGUMENT_KEYS and ch == "{":
                self._capturing = True
                self._depth += 1
                self._capture_first(ch, out)
                return
            self._depth += 1
            if ch == "{" and self._depth == self._call_depth:
                self._call = _Call(len(self.calls))
                self.calls.append(self._call)
                self._expect = "key"
        elif ch in "}]":
            if ch == "}" and at_call and self._call is not None:
                self._call.complete = self._call.name is not None and bool(self._call.arguments)
                self._call = None
            self._depth -= 1
        elif at_call and ch == ":":
            self._expect = "value"
        elif at_call and ch == ",":
            self._expect = "key"

    def _capture_first(self, ch: str, out: list[CallDelta]) -> None:
        call = self._call
        assert call is not None
        (call.arguments if call.announced else call.held).append(ch)
        if call.announced:
            out.append(CallDelta(call.index, arguments=ch))

    def _string_step(self, ch: str, was_in_string: bool, at_call: bool, out: list[CallDelta]) -> None:
        if not was_in_string:  # an opening quote
            reading = at_call and (self._expect == "key" or (self._expect == "value" and self._key == "name"))
            self._string = [] if reading else None
            return
        if self._in_string:  # inside: keep the raw characters
            if self._string is not None:
                self._string.append(ch)
            return
        if self._string is None:  # a closing quote of a string nobody reads
            return
        text = _unquote("".join(self._string))
        self._string = None
        if self._expect == "key":
            self._key = text
            self._expect = "colon"
        elif self._call is not None:
            self._announce(self._call, text, out)
            self._expect = "after"

    @staticmethod
    def _announce(call: _Call, name: str, out: list[CallDelta]) -> None:
        call.name = name
        call.announced = True
        call.arguments.extend(call.held)
        out.append(CallDelta(call.index, name=name, arguments="".join(call.held)))
        call.held.clear()


def _unquote(raw: str) -> str:
    try:
        return json.loads(f'"{raw}"')
    except ValueError:
        return raw


def _merged(deltas: list[CallDelta]) -> list[CallDelta]:
    """One delta per call and run: a name delta, then its arguments' characters joined."""
    merged: list[CallDelta] = []
    for d in deltas:
        last = merged[-1] if merged else None
        if last is not None and last.index == d.index and d.name is None:
            last.arguments += d.arguments
        else:
            merged.append(CallDelta(d.index, d.name, d.arguments))
    return merged
