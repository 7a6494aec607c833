"""Encoded images kept by hash: what a vision tower made of an image (its embeddings), so that an
image sent again (a resent conversation, another client's request) is not encoded again. Shared
by every engine that reads images; an entry is anything that tells its size in bytes (a NumPy
array, a torch tensor)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar

from llmflow.media.prompt import ImageCacheStats


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


EntryT = TypeVar("EntryT", bound=Sized)
#: an image's sha256 and which of its chunks (a model may cut an image into tiles)
Key = tuple[str, int]


class EncodedImages(Generic[EntryT]):
    """Encoded image chunks by (image hash, chunk), least recently used dropped first past
    `budget` bytes; counts its hits and misses (what a test or a metric reads)."""

    def __init__(self, budget: int):
        self.budget = budget
        self._items: OrderedDict[Key, EntryT] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Key) -> EntryT | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found

    def stats(self) -> ImageCacheStats:
        with self._lock:
            return ImageCacheStats(encoded=self.misses, reused=self.hits, bytes=self.bytes)

    def put(self, key: Key, embd: EntryT) -> None:
        if embd.nbytes > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self.bytes -= old.nbytes if old is not None else 0
            self._items[key] = embd
            self.bytes += embd.nbytes
            while self.bytes > self.budget:
                _, dropped = self._items.popitem(last=False)
                self.bytes -= dropped.nbytes
