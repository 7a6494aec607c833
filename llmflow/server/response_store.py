"""The responses a server keeps for the stateful Responses API (`store`, `previous_response_id`,
`GET`/`DELETE /v1/responses/{id}`, `input_items`): each stored response is its response object
and the input items it was generated from, the earlier turns' included.

Bounded, least recently used out first: at most `max_count` responses and `max_bytes` of their
JSON. In memory by default; with a `path`, kept in a sqlite file as well, so a restarted server
still has them. Used from the server's event loop only (a lock guards it all the same).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: default bounds: responses kept, and bytes of their JSON together
DEFAULT_MAX_COUNT = 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    used INTEGER NOT NULL,
    body TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class StoredResponse:
    """A response object as it was answered, and every input item it was generated from."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return self.response["id"]

    @property
    def conversation(self) -> list[dict[str, Any]]:
        """What a turn that continues this response starts from: its input, then its output."""
        return [*self.input_items, *self.response.get("output", [])]

    def to_json(self) -> str:
        return json.dumps({"response": self.response, "input_items": self.input_items}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> StoredResponse:
        data = json.loads(text)
        return cls(data["response"], data["input_items"])


class ResponseStore:
    """Stored responses by id, least recently used first out beyond the bounds."""

    def __init__(
        self,
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        path: str | Path | None = None,
    ):
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        #: id -> (JSON size, the response in memory; None when it is read from the file)
        self._entries: OrderedDict[str, tuple[int, StoredResponse | None]] = OrderedDict()
        self._bytes = 0
        self._db: sqlite3.Connection | None = None
        self._clock = 0
        if path is not None:
            self._db = _open(Path(path))
            self._load_index()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is None:
                return None
            self._entries.move_to_end(response_id)
            stored = entry[1]
            if self._db is None:
                return stored
            row = self._db.execute("SELECT body FROM responses WHERE id = ?", (response_id,)).fetchone()
            self._db.execute("UPDATE responses SET used = ? WHERE id = ?", (self._tick(), response_id))
            self._db.commit()
            return None if row is None else StoredResponse.from_json(row[0])

    def put(self, stored: StoredResponse) -> None:
        """Keep `stored` (replacing one of the same id); a response larger than the byte bound on
        its own is not kept."""
        text = stored.to_json()
        size = len(text.encode())
        with self._lock:
            self._remove(stored.id)
            if size > self.max_bytes:
                logger.warning("response %s (%d bytes) is larger than the store's bound", stored.id, size)
                return
            self._entries[stored.id] = (size, None if self._db is not None else stored)
            self._bytes += size
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (id, used, body) VALUES (?, ?, ?)",
                    (stored.id, self._tick(), text),
                )
            self._evict()
            if self._db is not None:
                self._db.commit()

    def delete(self, response_id: str) -> bool:
        with self._lock:
            found = self._remove(response_id)
            if self._db is not None:
                self._db.commit()
            return found

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- bookkeeping --------------------------------------------------------------------------------
    def _remove(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= entry[0]
        if self._db is not None:
            self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return True

    def _evict(self) -> None:
        while self._entries and (len(self._entries) > self.max_count or self._bytes > self.max_bytes):
            self._remove(next(iter(self._entries)))

    def _tick(self) -> int:
        """A use counter that orders the file's rows as the LRU order does."""
        self._clock += 1
        return self._clock

    def _load_index(self) -> None:
        """The file's responses, least recently used first; beyond the bounds, the oldest go."""
        assert self._db is not None
        query = "SELECT id, LENGTH(CAST(body AS BLOB)), used FROM responses ORDER BY used"
        for response_id, size, used in self._db.execute(query).fetchall():
            self._entries[response_id] = (size, None)
            self._bytes += size
            self._clock = used
        self._evict()
        self._db.commit()


def _open(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(_SCHEMA)
    db.commit()
    return db
