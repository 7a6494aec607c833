"""Saved conversation states beyond the engine's own sequences: a host-memory tier (a byte-budgeted
LRU, like llama-server's `--cache-ram`) and an optional directory on disk that outlives a restart.

An entry is the KV state of one sequence (bytes, as the engine saved it) and the tokens it holds.
A new request asks for the entry sharing the longest token prefix with its prompt; the engine
restores it into a free sequence and computes only the rest. Engine-independent: the engine
decides when to save (a sequence about to be overwritten) and how (llama.cpp's
`llama_state_seq_get_data`).

A disk file carries a header naming the model it was saved from (`fingerprint`) and a checksum
of the state: a file of another model, or a damaged one, is refused with a log line and never
loaded; the prompt is computed instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

MAGIC = b"LLMFLOW-KV\x00\x01"
SUFFIX = ".kv"
#: a saved state shorter than this is not worth an entry (recomputing it is cheap)
MIN_TOKENS = 64
#: a sequence's state as the engine saved it (written in place into a bytearray) or read from disk
State = bytes | bytearray


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What the tiers hold now, for the server's gauges."""

    host_bytes: int
    host_entries: int
    disk_bytes: int
    disk_entries: int


class _Entry:
    __slots__ = ("disk_bytes", "name", "path", "state", "tokens")

    def __init__(self, tokens: tuple[int, ...]):
        self.tokens = tokens
        self.name = _name_of(tokens)
        #: the state in host memory, or None (on disk only)
        self.state: State | None = None
        self.path: Path | None = None
        self.disk_bytes = 0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (a binary search over slice comparisons, which
    run in C: cheap for thousands of tokens)."""
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = tuple(a), tuple(b)
    lo, hi = 0, min(len(a), len(b))
    if hi and a[0] != b[0]:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _name_of(tokens: tuple[int, ...]) -> str:
    return hashlib.sha1(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()


class PromptCache:
    """Saved sequence states by token prefix, in host memory within `host_bytes` and, with a
    `disk_dir`, on disk within `disk_bytes` (written in a background thread, so the decode loop
    pays only the memory copy). Used from one thread (the engine's), apart from the writer."""

    def __init__(
        self,
        *,
        host_bytes: int,
        fingerprint: str,
        disk_dir: Path | None = None,
        disk_bytes: int = 0,
        min_tokens: int = MIN_TOKENS,
    ):
        self.host_budget = host_bytes
        self.disk_budget = disk_bytes if disk_dir is not None else 0
        self.fingerprint = fingerprint
        self.min_tokens = min_tokens
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._host_bytes = 0
        self._disk_bytes = 0
        self._lock = threading.Lock()  # the writer thread updates disk bookkeeping
        self._dir = disk_dir
        #: disk writes for the writer thread: (entry, state), an Event to set when all before it
        #: are written, or None to stop
        self._writes: queue.SimpleQueue[tuple[_Entry, State] | threading.Event | None] | None = None
        if disk_dir is not None and disk_bytes > 0:
            disk_dir.mkdir(parents=True, exist_ok=True)
            self._index_disk(disk_dir)
            self._writes = queue.SimpleQueue()
            self._writer = threading.Thread(
                target=self._write_loop, name="llmflow-prompt-cache-writer", daemon=True
            )
            self._writer.start()

    @property
    def enabled(self) -> bool:
        return self.host_budget > 0 or self.disk_budget > 0

    @property
    def persistent(self) -> bool:
        """States outlive the process (a disk tier): worth saving what is kept at shutdown."""
        return self._writes is not None

    def stats(self) -> CacheStats:
        with self._lock:
            disk = sum(1 for e in self._entries.values() if e.path is not None)
            return CacheStats(
                self._host_bytes,
                sum(1 for e in self._entries.values() if e.state is not None),
                self._disk_bytes,
                disk,
            )

    # -- lookups --

    def longest(self, tokens: Sequence[int]) -> tuple[int, str | None]:
        """The most tokens of `tokens` that one entry holds, and that entry's key."""
        best, key = 0, None
        tokens = tuple(tokens)
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            n = common_prefix(entry.tokens, tokens)
            if n > best:
                best, key = n, entry.name
        return best, key

    def load(self, key: str) -> tuple[tuple[int, ...], State] | None:
        """An entry's tokens and state (read from disk when it is not in memory), or None when it
        is gone or its file is refused."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            state = entry.state
            path = entry.path
        if state is not None:
            return entry.tokens, state
        if path is None:
            return None
        state = self._read_state(path, entry.tokens)
        if state is None:
            self._forget(entry)
            return None
        self._hold_in_memory(entry, state)
        return entry.tokens, state

    # -- saving --

    def covers(self, tokens: Sequence[int]) -> bool:
        """An entry holds all of `tokens` already (or there are too few to keep)."""
        if len(tokens) < self.min_tokens or not self.enabled:
            return True
        n, _ = self.longest(tokens)
        return n >= len(tokens)

    def put(self, tokens: Sequence[int], state: State) -> None:
        """Keep `state` (the KV of `tokens`); entries whose tokens it extends are dropped."""
        if len(tokens) < self.min_tokens or not self.enabled:
            return
        entry = _Entry(tuple(tokens))
        with self._lock:
            extended = [
                e for e in self._entries.values() if common_prefix(e.tokens, entry.tokens) == len(e.tokens)
            ]
        for old in extended:
            self._forget(old)
        with self._lock:
            self._entries[entry.name] = entry
        if self.host_budget > 0:
            self._hold_in_memory(entry, state)
        if self._writes is not None:
            self._writes.put((entry, state))
        elif entry.state is None:  # too big for memory and no disk: nothing kept
            self._forget(entry)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the disk writer once the writes queued so far are done."""
        if self._writes is not None:
            self._writes.put(None)
            self._writer.join(timeout)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued disk write is done (tests, shutdown)."""
        if self._writes is None:
            return
        done = threading.Event()
        self._writes.put(done)
        done.wait(timeout)

    # -- host tier --

    def _hold_in_memory(self, entry: _Entry, state: State) -> None:
        if len(state) > self.host_budget:
            return
        with self._lock:
            if entry.name not in self._entries or entry.state is not None:
                return
            entry.state = state
            self._host_bytes += len(state)
            self._entries.move_to_end(entry.name)
            dropped = self._trim_host()
        for gone in dropped:
            self._forget(gone)

    def _trim_host(self) -> list[_Entry]:
        """Drop the least recently used states beyond the budget (under `_lock`); an entry on
        disk stays listed. Returns the entries left with nothing."""
        gone = []
        for entry in list(self._entries.values()):
            if self._host_bytes <= self.host_budget:
                break
            if entry.state is None:
                continue
            self._host_bytes -= len(entry.state)
            entry.state = None
            if entry.path is None and self._writes is None:
                gone.append(entry)
        return gone

    def _forget(self, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(entry.name) is entry:
                del self._entries[entry.name]
            if entry.state is not None:
                self._host_bytes -= len(entry.state)
                entry.state = None
            path, entry.path = entry.path, None
            self._disk_bytes -= entry.disk_bytes
            entry.disk_bytes = 0
        if path is not None:
            path.unlink(missing_ok=True)

    # -- disk tier --

    def _write_loop(self) -> None:
        assert self._writes is not None
        while (item := self._writes.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
                continue
            entry, state = item
            try:
                self._write(entry, state)
            except OSError as exc:
                log.warning("prompt cache: could not write %s: %s", entry.name, exc)

    def _write(self, entry: _Entry, state: State) -> None:
        assert self._dir is not None
        with self._lock:
            if self._entries.get(entry.name) is not entry:
                return  # dropped (extended by a newer entry) before it was written
        header = json.dumps(
            {
                "fingerprint": self.fingerprint,
                "tokens": list(entry.tokens),
                "size": len(state),
                "sha256": hashlib.sha256(state).hexdigest(),
            }
        ).encode()
        path = self._dir / f"{entry.name}{SUFFIX}"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            f.write(state)
        os.replace(tmp, path)
        size = path.stat().st_size
        with self._lock:
            if self._entries.get(entry.name) is not entry:
                stale = True
            else:
                stale = False
                entry.path, entry.disk_bytes = path, size
                self._disk_bytes += size
        if stale:
            path.unlink(missing_ok=True)
            return
        self._trim_disk()

    def _trim_disk(self) -> None:
        """Remove the least recently used files beyond the disk budget."""
        while True:
            with self._lock:
                if self._disk_bytes <= self.disk_budget:
                    return
                victim = next((e for e in self._entries.values() if e.path is not None), None)
                if victim is None:
                    return
                path, victim.path = victim.path, None
                self._disk_bytes -= victim.disk_bytes
                victim.disk_bytes = 0
                if victim.state is None:
                    del self._entries[victim.name]
            assert path is not None
            path.unlink(missing_ok=True)

    def _index_disk(self, directory: Path) -> None:
        """List the files a previous run left (headers only; states are read when used)."""
        files = sorted(directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)
        for path in files:
            header = self._read_header(path)
            if header is None:
                continue
            entry = _Entry(tuple(header["tokens"]))
            entry.path, entry.disk_bytes = path, path.stat().st_size
            self._entries[entry.name] = entry
            self._disk_bytes += entry.disk_bytes
        if self._entries:
            log.info("prompt cache: %d saved states on disk (%d bytes)", len(self._entries), self._disk_bytes)
        self._trim_disk()

    def _read_header(self, path: Path) -> dict | None:
        try:
            with open(path, "rb") as f:
                return self._header_of(f, path)
        except (OSError, ValueError) as exc:
            log.warning("prompt cache: refused %s (unreadable: %s); its prompts will be computed", path, exc)
            return None

    def _header_of(self, f: BinaryIO, path: Path) -> dict | None:
        if f.read(len(MAGIC)) != MAGIC:
            log.warning("prompt cache: refused %s (not an llmflow prompt-cache file)", path)
            return None
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 64 << 20:
            raise ValueError("header too long")
        header = json.loads(f.read(length))
        if header.get("fingerprint") != self.fingerprint:
            log.warning("prompt cache: refused %s (saved from another model or build)", path)
            return None
        if not isinstance(header.get("tokens"), list) or not header["tokens"]:
            raise ValueError("no tokens in the header")
        return header

    def _read_state(self, path: Path, tokens: tuple[int, ...]) -> State | None:
        try:
            with open(path, "rb") as f:
                header = self._header_of(f, path)
                if header is None:
                    return None
                state = f.read()
        except (OSError, ValueError) as exc:
            log.warning("prompt cache: refused %s (unreadable: %s); computing the prompt", path, exc)
            return None
        if tuple(header["tokens"]) != tokens or len(state) != header.get("size"):
            log.warning("prompt cache: refused %s (truncated or changed); computing the prompt", path)
            return None
        if hashlib.sha256(state).hexdigest() != header.get("sha256"):
            log.warning("prompt cache: refused %s (checksum mismatch); computing the prompt", path)
            return None
        return state
