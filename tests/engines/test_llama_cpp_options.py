"""How the llama.cpp engines' options resolve against the build and the hardware: pure logic,
checked without loading a model (the GPU side runs on any machine)."""

from __future__ import annotations

import pytest

from llmflow.engines.llama_cpp import ALL_LAYERS, KV_CACHE_TYPES, LlamaCppOptions, placement
from llmflow.engines.llama_cpp_batched import (
    CPU_N_BATCH,
    CPU_PREFILL_CHUNK,
    FIRST_TOKEN_WAIT_S,
    GPU_KV_BUDGET_BYTES,
    GPU_MAX_SEQUENCES,
    GPU_N_BATCH,
    GPU_PREFILL_CHUNK,
    LlamaCppBatchedOptions,
    batch_shape,
    default_parallel,
    first_token_wait_s,
)
from llmflow.errors import InvalidParams

#: a Llama-3-8B's f16 KV cache per token: 2 (K, V) x 32 layers x 8 heads x 128 x 2 bytes
KV_8B = 2 * 32 * 8 * 128 * 2


def test_a_cpu_build_keeps_every_layer_on_the_cpu_with_flash_attention():
    where = placement(LlamaCppOptions(), gpu_backend=False)
    assert (where.n_gpu_layers, where.flash_attn, where.on_gpu) == (0, True, False)
    assert where.kv_type == KV_CACHE_TYPES["f16"]
    # asked for layers that cannot go anywhere: llama.cpp would ignore them, and so does placement
    assert placement(LlamaCppOptions(n_gpu_layers=-1), gpu_backend=False).on_gpu is False


def test_a_gpu_build_offloads_every_layer_with_flash_attention_by_default():
    where = placement(LlamaCppOptions(), gpu_backend=True)
    assert (where.n_gpu_layers, where.flash_attn, where.on_gpu) == (ALL_LAYERS, True, True)
    assert placement(LlamaCppOptions(n_gpu_layers=-1), gpu_backend=True).n_gpu_layers == ALL_LAYERS


def test_explicit_gpu_options_win():
    assert placement(LlamaCppOptions(n_gpu_layers=0), gpu_backend=True).on_gpu is False
    assert placement(LlamaCppOptions(flash_attn=False), gpu_backend=False).flash_attn is False
    assert placement(LlamaCppOptions(n_gpu_layers=12), gpu_backend=True).n_gpu_layers == 12
    assert placement(LlamaCppOptions(flash_attn=False), gpu_backend=True).flash_attn is False
    assert placement(LlamaCppOptions(flash_attn=True), gpu_backend=False).flash_attn is True


def test_a_quantized_kv_cache_needs_flash_attention():
    where = placement(LlamaCppOptions(kv_cache_type="q8_0"), gpu_backend=False)
    assert where.kv_type == KV_CACHE_TYPES["q8_0"] and where.flash_attn is True
    with pytest.raises(InvalidParams) as raised:
        LlamaCppOptions.parse({"kv_cache_type": "q8_0", "flash_attn": False})
    assert [p.field for p in raised.value.problems] == ["kv_cache_type"]


@pytest.mark.parametrize("bad", [{"kv_cache_type": "q4_0"}, {"n_gpu_layers": -2}, {"flash_attn": "maybe"}])
def test_bad_gpu_options_name_their_field(bad):
    with pytest.raises(InvalidParams) as raised:
        LlamaCppBatchedOptions.parse(bad)
    assert [p.field for p in raised.value.problems] == list(bad)


def shape(on_gpu, n_ctx=4096, cores=16, **options):
    return batch_shape(
        LlamaCppBatchedOptions.parse(options),
        on_gpu=on_gpu,
        n_ctx=n_ctx,
        kv_bytes_per_token=KV_8B,
        cores=cores,
        max_sequences=256,
    )


def test_cpu_defaults_are_unchanged():
    s = shape(False, n_ctx=512, cores=2)
    assert (s.parallel, s.n_batch, s.prefill_chunk) == (8, CPU_N_BATCH, CPU_PREFILL_CHUNK)
    assert (s.kv_unified, s.one_pass, s.on_gpu) == (False, False, False)


def test_a_step_waits_for_first_tokens_to_go_out_only_where_the_pass_takes_every_core():
    assert first_token_wait_s(shape(False, cores=2), n_threads=2, cores=2) == FIRST_TOKEN_WAIT_S
    assert first_token_wait_s(shape(False, cores=4), n_threads=2, cores=4) == 0.0
    assert first_token_wait_s(shape(True), n_threads=16, cores=16) == 0.0


def test_gpu_defaults_batch_wide_in_one_pass_per_step():
    s = shape(True, n_ctx=1024)
    assert (s.parallel, s.n_batch, s.prefill_chunk) == (GPU_MAX_SEQUENCES, GPU_N_BATCH, GPU_PREFILL_CHUNK)
    assert (s.kv_unified, s.one_pass, s.on_gpu) == (False, True, True)


def test_in_one_pass_a_prompt_chunk_fits_beside_every_other_sequence():
    """A chunk larger than what the other sequences leave of a batch would wait until enough of
    them ended: the default shrinks to fit, an explicit one is refused naming the option."""
    s = shape(True, parallel=64, n_batch=512)
    assert s.prefill_chunk == 512 - 63
    assert shape(True, parallel=64, n_batch=512, prefill_chunk=449).prefill_chunk == 449
    with pytest.raises(InvalidParams) as raised:
        shape(True, parallel=64, n_batch=512, prefill_chunk=450)
    assert [p.field for p in raised.value.problems] == ["prefill_chunk"]
    assert "n_batch - parallel + 1 (449)" in str(raised.value)
    # separate passes per chunk: the whole batch is the chunk's
    assert shape(True, parallel=64, n_batch=512, prefill_chunk=512, one_pass=False).prefill_chunk == 512


def test_the_gpu_default_parallel_keeps_the_kv_cache_within_its_budget():
    n_ctx = 8192
    parallel = default_parallel(n_ctx, KV_8B, cores=16, on_gpu=True)
    assert parallel * n_ctx * KV_8B <= GPU_KV_BUDGET_BYTES < (parallel + 1) * n_ctx * KV_8B
    assert default_parallel(256, KV_8B, cores=1, on_gpu=True) == GPU_MAX_SEQUENCES  # cores don't matter
    assert default_parallel(10**9, KV_8B, cores=16, on_gpu=True) == 1


def test_explicit_batch_options_win_and_bad_combinations_name_the_option():
    s = shape(True, parallel=8, n_batch=256, prefill_chunk=64, kv_unified=True)
    assert (s.parallel, s.n_batch, s.prefill_chunk, s.kv_unified, s.one_pass) == (8, 256, 64, True, True)
    # one KV pool makes a mixed step one micro-batch: then it is one pass on the CPU too
    assert shape(False, kv_unified=True).one_pass is True
    assert shape(True, one_pass=False).one_pass is False
    assert shape(True, parallel=200).n_batch == GPU_N_BATCH
    assert shape(False, parallel=200, n_ctx=64).n_batch == CPU_N_BATCH
    for options, field in [
        ({"parallel": 300}, "parallel"),
        ({"parallel": 64, "n_batch": 32}, "n_batch"),
        ({"n_batch": 16, "prefill_chunk": 32}, "prefill_chunk"),
    ]:
        with pytest.raises(InvalidParams) as raised:
            shape(False, **options)
        assert [p.field for p in raised.value.problems] == [field], options
