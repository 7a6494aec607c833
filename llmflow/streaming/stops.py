"""Stop strings over streamed text, with the smallest possible hold-back."""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Finds stop strings in text that arrives in pieces.

    `feed` returns the text that is safe to emit now and whether a stop string was found. It holds
    back only a tail that could still grow into a stop string, so nothing of a stop string is ever
    emitted and nothing else is delayed longer than needed. When several stop strings match, the
    one that starts earliest cuts. After a stop, the matcher must not be fed again.
    """

    __slots__ = ("_stops", "_first_chars", "_longest", "_held", "matched")

    def __init__(self, stops: Sequence[str]):
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        self._stops = tuple(stops)
        self._first_chars = frozenset(s[0] for s in self._stops)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""
        #: the stop string that cut the text, once one has
        self.matched: str | None = None

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        buffer = self._held + text
        match = self._earliest_match(buffer)
        if match is not None:
            cut, self.matched = match
            self._held = ""
            return buffer[:cut], True
        hold_from = self._hold_start(buffer)
        self._held = buffer[hold_from:]
        return buffer[:hold_from], False

    def flush(self) -> str:
        """The held text, at the end of a stream that did not stop on a string."""
        held, self._held = self._held, ""
        return held

    def _earliest_match(self, buffer: str) -> tuple[int, str] | None:
        """Where the earliest stop string starts, and which one it is."""
        best = None
        for stop in self._stops:
            index = buffer.find(stop)
            if index != -1 and (best is None or index < best[0]):
                best = index, stop
        return best

    def _hold_start(self, buffer: str) -> int:
        """Index where the longest suffix that is a proper prefix of some stop string begins."""
        first_chars = self._first_chars
        for start in range(max(0, len(buffer) - self._longest + 1), len(buffer)):
            if buffer[start] not in first_chars:
                continue
            tail = buffer[start:]
            if any(stop.startswith(tail) for stop in self._stops):
                return start
        return len(buffer)
