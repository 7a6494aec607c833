"""The prompt cache's tiers on their own: lookups by token prefix, the byte budgets, a disk
tier that outlives a restart, and files that are never loaded (damaged, another model's)."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from llmflow.engines.prompt_cache import PromptCache, common_prefix


def tokens(i: int, n: int = 100) -> list[int]:
    return [i * 1000 + k for k in range(n)]


def state(i: int, size: int = 1000) -> bytes:
    return bytes([i % 256]) * size


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40))
def test_common_prefix_counts_the_shared_leading_tokens(a, b):
    expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert common_prefix(a, b) == expected
    assert common_prefix(tuple(a), b) == expected


def test_the_longest_shared_prefix_wins():
    cache = PromptCache(host_bytes=1 << 20, fingerprint="m")
    cache.put(tokens(1), state(1))
    cache.put([*tokens(1)[:70], *tokens(2)[:40]], state(2))
    n, key = cache.longest([*tokens(1), 5, 6])
    assert n == 100
    assert cache.load(key) == (tuple(tokens(1)), state(1))
    assert cache.longest(tokens(3))[1] is None


def test_an_entry_that_extends_another_replaces_it():
    cache = PromptCache(host_bytes=1 << 20, fingerprint="m")
    cache.put(tokens(1), state(1))
    cache.put([*tokens(1), 7, 8, 9], state(2))
    assert cache.stats().host_entries == 1
    assert cache.covers(tokens(1))


def test_short_states_are_not_kept():
    cache = PromptCache(host_bytes=1 << 20, fingerprint="m", min_tokens=64)
    cache.put(tokens(1, 10), state(1))
    assert cache.stats().host_entries == 0


def test_the_host_tier_keeps_within_its_budget_least_recently_used_out():
    cache = PromptCache(host_bytes=3500, fingerprint="m")
    for i in range(3):
        cache.put(tokens(i), state(i))
    cache.load(cache.longest(tokens(0))[1])  # 0 is now the most recently used
    cache.put(tokens(3), state(3))
    stats = cache.stats()
    assert stats.host_bytes <= 3500 and stats.host_entries == 3
    assert cache.longest(tokens(1))[1] is None  # the least recently used went
    assert cache.longest(tokens(0))[0] == 100


def test_the_disk_tier_outlives_a_restart(tmp_path):
    cache = PromptCache(host_bytes=1 << 20, fingerprint="m", disk_dir=tmp_path, disk_bytes=1 << 20)
    cache.put(tokens(1), state(1, 5000))
    cache.flush()
    cache.close()
    again = PromptCache(host_bytes=1 << 20, fingerprint="m", disk_dir=tmp_path, disk_bytes=1 << 20)
    n, key = again.longest([*tokens(1), 4])
    assert n == 100 and again.load(key) == (tuple(tokens(1)), state(1, 5000))
    assert again.stats().disk_entries == 1


def test_the_disk_tier_keeps_within_its_budget(tmp_path):
    cache = PromptCache(host_bytes=0, fingerprint="m", disk_dir=tmp_path, disk_bytes=12_000)
    for i in range(5):
        cache.put(tokens(i), state(i, 5000))
        cache.flush()
    files = list(tmp_path.glob("*.kv"))
    assert sum(f.stat().st_size for f in files) <= 12_000 and len(files) == 2
    assert cache.stats().disk_bytes <= 12_000
    assert cache.longest(tokens(4))[0] == 100 and cache.longest(tokens(0))[1] is None


def test_a_damaged_file_is_refused_with_a_log_line_and_never_loaded(tmp_path, caplog):
    cache = PromptCache(host_bytes=0, fingerprint="m", disk_dir=tmp_path, disk_bytes=1 << 20)
    cache.put(tokens(1), state(1, 5000))
    cache.flush()
    (path,) = tmp_path.glob("*.kv")
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    again = PromptCache(host_bytes=0, fingerprint="m", disk_dir=tmp_path, disk_bytes=1 << 20)
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.prompt_cache"):
        assert again.load(again.longest(tokens(1))[1]) is None
    assert "checksum" in caplog.text
    assert again.longest(tokens(1))[1] is None and not path.exists()


def test_another_models_file_and_a_foreign_file_are_refused(tmp_path, caplog):
    cache = PromptCache(host_bytes=0, fingerprint="model-a", disk_dir=tmp_path, disk_bytes=1 << 20)
    cache.put(tokens(1), state(1, 5000))
    cache.flush()
    (tmp_path / "junk.kv").write_bytes(b"not a cache file at all")
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.prompt_cache"):
        other = PromptCache(host_bytes=0, fingerprint="model-b", disk_dir=tmp_path, disk_bytes=1 << 20)
    assert other.longest(tokens(1))[1] is None
    assert "another model" in caplog.text and "not an llmflow prompt-cache file" in caplog.text
