"""The conversation cache on both llama.cpp engines with the embedded model: conversations that
leave the engine come back from the host tier, a restarted engine finds them on disk, and a
damaged file is refused and the prompt computed. Only counts are checked, never the words."""

from __future__ import annotations

import logging

import pytest

from llmflow import LLM

ENGINES = {
    "llama_cpp_batched": {"n_ctx": 1024, "parallel": 2},
    "llama_cpp": {"n_ctx": 1024},
}
GREEDY = {"temperature": 0.0, "max_tokens": 6}


def conversation(i: int) -> list[dict]:
    rules = " ".join(f"Rule {k}: customers of shop {i} get answer {k * i}." for k in range(12))
    return [{"role": "system", "content": rules}, {"role": "user", "content": "Which rule is first?"}]


def turn(llm, messages):
    """One turn appended to `messages`; its usage."""
    chunks = list(llm.stream(messages, GREEDY))
    messages += [
        {"role": "assistant", "content": "".join(c.text for c in chunks)},
        {"role": "user", "content": "And the next?"},
    ]
    return chunks[-1].usage


@pytest.mark.parametrize("engine", ENGINES)
def test_conversations_beyond_the_sequences_come_back_from_host_memory(engine):
    llm = LLM.load(engine=engine, engine_options={**ENGINES[engine], "prompt_cache_ram_mib": 256})
    try:
        sessions = [conversation(i) for i in range(4)]
        firsts = [turn(llm, messages) for messages in sessions]
        assert all(u.cached_tokens < u.prompt_tokens // 2 for u in firsts)
        for messages in sessions:
            usage = turn(llm, messages)
            assert usage.cached_tokens >= 0.9 * usage.prompt_tokens - 8
        stats = llm.engine.cache_stats()
        assert 0 < stats.host_bytes <= 256 << 20 and stats.host_entries >= 2
    finally:
        llm.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_restarted_engine_finds_the_conversation_on_disk(engine, tmp_path):
    options = {**ENGINES[engine], "prompt_cache_dir": str(tmp_path)}
    messages = conversation(7)
    llm = LLM.load(engine=engine, engine_options=options)
    try:
        first = turn(llm, messages)
    finally:
        llm.close()  # what the engine keeps goes to disk
    assert list(tmp_path.glob("*.kv"))
    again = LLM.load(engine=engine, engine_options=options)
    try:
        usage = turn(again, messages)
        assert usage.cached_tokens >= first.prompt_tokens
    finally:
        again.close()


def test_a_damaged_disk_file_is_refused_and_the_prompt_computed(tmp_path, caplog):
    options = {**ENGINES["llama_cpp"], "prompt_cache_dir": str(tmp_path)}
    messages = conversation(3)
    llm = LLM.load(engine="llama_cpp", engine_options=options)
    try:
        turn(llm, messages)
    finally:
        llm.close()
    for path in tmp_path.glob("*.kv"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    again = LLM.load(engine="llama_cpp", engine_options=options)
    try:
        with caplog.at_level(logging.WARNING, logger="llmflow.engines.prompt_cache"):
            usage = turn(again, messages)
        assert usage.cached_tokens == 0
        assert "checksum mismatch" in caplog.text
    finally:
        again.close()


def test_prompt_cache_off_reuses_nothing_on_the_one_at_a_time_engine():
    llm = LLM.load(engine="llama_cpp", engine_options={**ENGINES["llama_cpp"], "prompt_cache": False})
    try:
        messages = conversation(1)
        turn(llm, messages)
        assert turn(llm, messages).cached_tokens == 0
        assert llm.engine.cache_stats() is None
    finally:
        llm.close()
