"""Raw transformers against llmflow streaming through the transformers engine, on one GPU.

A Llama-3-8B-shaped model with random bf16 weights (`from_config`, nothing downloaded), prompts of
128 random tokens, 256 new tokens that never end early (raw: `min_new_tokens`; continuous
batching: no EOS id; llmflow: the engine's `ignore_eos`). Greedy everywhere. Three paths, each
measured raw and through llmflow (`LLM.stream_prepared`, every token through the streaming core):

- dynamic: `generate` with a DynamicCache / the engine with `static_cache=False`
- static:  `generate(cache_implementation="static")` (auto-compiled, CUDA graphs through
           torch.compile) / the engine's CUDA default (static cache, compiled decode step replayed
           as one CUDA graph, one token queued ahead)
- batch:   `generate_batch` of 64 requests / 64 concurrent llmflow streams on the engine's
           continuous batching (transformers' ContinuousBatchingManager), both greedy-only
           (`batch_sampling=False`); `batch_sampling` repeats both with the logits processors on
           (what the engine needs for per-request temperature/top-k/top-p)

Throughput is end-to-end: generated tokens over wall time from the call to the last token
(prefill included, compile and warm-up excluded). Results are written after every section, so a
run cut short still leaves what it measured.

    python benchmarks/bench_transformers_gpu.py --out benchmarks/results/transformers_gpu.json
    python benchmarks/bench_transformers_gpu.py --tiny --out benchmarks/results/tmp/tiny.json  # CPU check
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmflow.engines.hf import TransformersEngine  # noqa: E402
from llmflow.engines.hf.batching import BatchingSetup  # noqa: E402
from llmflow.llm import LLM, PreparedRequest  # noqa: E402
from llmflow.params import SamplingParams  # noqa: E402
from tests.fakes.hf_models import byte_tokenizer  # noqa: E402

HBM_BYTES_PER_S = 4.8e12  # H200 datasheet
LLAMA3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
TINY = {
    **LLAMA3_8B,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


class Bench:
    """The model, its prompts, and the results so far (written to disk after every section)."""

    def __init__(self, args: argparse.Namespace):
        import torch

        self.args = args
        self.torch = torch
        self.started = time.perf_counter()
        self.device = torch.device("cpu" if args.tiny else "cuda")
        self.dtype = torch.float32 if args.tiny else torch.bfloat16
        self.results: dict[str, Any] = {"command": " ".join(sys.argv), "sections": {}}
        self.model, self.tokenizer = self._build()
        generator = torch.Generator().manual_seed(0)
        vocab = self.model.config.vocab_size
        self.prompts = [
            torch.randint(300, vocab - 300, (args.prompt_tokens,), generator=generator).tolist()
            for _ in range(args.concurrency)
        ]
        self.results["setup"] = self._setup()
        self.save()

    def _build(self) -> tuple[Any, Any]:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch = self.torch
        tokenizer = byte_tokenizer(LLAMA3_8B["vocab_size"])
        shape = TINY if self.args.tiny else LLAMA3_8B
        config = LlamaConfig(
            **shape, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
        )
        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with self.device:
                model = LlamaForCausalLM(config).eval()
        finally:
            torch.set_default_dtype(previous)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        return model, tokenizer

    def _setup(self) -> dict[str, Any]:
        import transformers

        torch = self.torch
        weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        setup = {
            "model": "random Llama-3-8B shape" if not self.args.tiny else "random tiny Llama (smoke run)",
            "dtype": str(self.dtype),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "weight_bytes": weight_bytes,
            "roofline_tok_s_datasheet": HBM_BYTES_PER_S / weight_bytes,
            "prompt_tokens": self.args.prompt_tokens,
            "new_tokens": self.args.new_tokens,
            "concurrency": self.args.concurrency,
            "page_size": self.args.page_size,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "attn_implementation": self.model.config._attn_implementation,
        }
        if self.device.type == "cuda":
            setup["gpu"] = torch.cuda.get_device_name()
            setup["copy_bandwidth_bytes_s"] = self._copy_bandwidth()
            setup["roofline_tok_s_measured"] = setup["copy_bandwidth_bytes_s"] / weight_bytes
        return setup

    def _copy_bandwidth(self) -> float:
        torch = self.torch
        src = torch.empty(2 * 1024**3, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            dst.copy_(src)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / 10
        del src, dst
        return 2 * 2 * 1024**3 / seconds  # bytes read + written

    # -- bookkeeping ---------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def save(self) -> None:
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(self.results, indent=2))

    def section(self, name: str, fn: Any) -> None:
        if self.elapsed() > self.args.budget_s:
            self.results["sections"][name] = {"skipped": f"time budget of {self.args.budget_s} s spent"}
            self.save()
            return
        print(f"[{self.elapsed():6.1f}s] {name} ...", flush=True)
        start = time.perf_counter()
        try:
            result = fn()
        except Exception as exc:  # one broken path must not lose the others' numbers
            logging.exception("section %s failed", name)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result["section_wall_s"] = round(time.perf_counter() - start, 1)
        self.results["sections"][name] = result
        print(f"[{self.elapsed():6.1f}s] {name}: {_brief(result)}", flush=True)
        self.free()
        self.save()

    def free(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    # -- raw transformers ----------------------------------------------------------------------

    def raw_generate(self, runs: int, **kwargs: Any) -> dict[str, Any]:
        torch = self.torch
        prompt = torch.tensor([self.prompts[0]], device=self.device)
        n = self.args.new_tokens

        def once(tokens: int) -> tuple[int, float]:
            self.sync()
            start = time.perf_counter()
            with torch.inference_mode():
                out = self.model.generate(
                    prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, **kwargs
                )
            self.sync()
            return out.shape[1] - prompt.shape[1], time.perf_counter() - start

        warm_start = time.perf_counter()
        once(n if kwargs else 8)  # compile and capture happen here
        warmup_s = time.perf_counter() - warm_start
        timed = [once(n) for _ in range(runs)]
        return _summary(timed, warmup_s=warmup_s)

    def raw_generate_batch(self, sampling: bool = False) -> dict[str, Any]:
        """`generate_batch` with the paged cache sized as the engine sizes it. `sampling` adds the
        logits processors (temperature, top-k, top-p) that llmflow's engine keeps on for
        per-request params, to show what they cost."""
        from transformers import GenerationConfig

        setup = BatchingSetup(
            max_concurrency=self.args.concurrency,
            max_sequence=self.args.prompt_tokens + self.args.new_tokens,
            max_batch_tokens=8192 if self.device.type == "cuda" else 512,
            sampling=False,  # engine-wide processors: raw `generate_batch` takes no per-request params
            page_size=self.args.page_size,
        )
        batching = setup.transformers_config()
        sample = {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.95} if sampling else {}

        def config(tokens: int) -> Any:  # eos -1: no request ends early
            return GenerationConfig(max_new_tokens=tokens, eos_token_id=-1, pad_token_id=0, **sample)

        warm_start = time.perf_counter()
        self.model.generate_batch(self.prompts, config(8), batching)
        warmup_s = time.perf_counter() - warm_start
        self.sync()
        start = time.perf_counter()
        outputs = self.model.generate_batch(
            self.prompts, config(self.args.new_tokens), batching, warmup=False
        )
        self.sync()
        seconds = time.perf_counter() - start
        tokens = sum(len(o.generated_tokens) for o in outputs.values())
        return {
            "requests": len(outputs),
            "tokens": tokens,
            "seconds": seconds,
            "tok_s": tokens / seconds,
            "warmup_s": warmup_s,
        }

    # -- llmflow -------------------------------------------------------------------------------

    def engine(self, **options: Any) -> tuple[LLM, float]:
        start = time.perf_counter()
        options = {"ignore_eos": True, "n_ctx": self.args.prompt_tokens + self.args.new_tokens, **options}
        if self.args.tiny:
            options.setdefault("device", "cpu")
        engine = TransformersEngine.from_model(self.model, self.tokenizer, model_name="random-8b", **options)
        return LLM(engine), time.perf_counter() - start

    def llmflow_single(self, runs: int, **options: Any) -> dict[str, Any]:
        llm, load_s = self.engine(**options)
        try:
            _stream(llm, self.prompts[0], 8)  # warm-up
            timed = [_stream(llm, self.prompts[0], self.args.new_tokens) for _ in range(runs)]
            result = _summary([(t["tokens"], t["seconds"]) for t in timed], warmup_s=load_s)
            result["ttft_s"] = statistics.median(t["ttft_s"] for t in timed)
            result["decode_tok_s"] = statistics.median(t["decode_tok_s"] for t in timed)
            runner = llm.engine._runner
            result["cuda_graph"] = bool(getattr(runner, "uses_cuda_graph", False))
            return result
        finally:
            llm.close()

    def llmflow_concurrent(self, sampling: bool) -> dict[str, Any]:
        llm, load_s = self.engine(
            continuous_batching=True,
            max_concurrency=self.args.concurrency,
            batch_sampling=sampling,
            batch_page_size=self.args.page_size,
        )
        try:
            _concurrent(llm, self.prompts, 8)  # warm-up
            result = _concurrent(llm, self.prompts, self.args.new_tokens)
            result["warmup_s"] = load_s
            return result
        finally:
            llm.close()


def _stream(llm: LLM, prompt: list[int], tokens: int) -> dict[str, Any]:
    request = PreparedRequest(list(prompt), SamplingParams(temperature=0.0, max_tokens=tokens))
    start = time.perf_counter()
    first = None
    produced = 0
    for chunk in llm.stream_prepared(request):
        if chunk.is_final:
            produced = chunk.usage.completion_tokens
        elif first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    first = first or end
    return {
        "tokens": produced,
        "seconds": end - start,
        "ttft_s": first - start,
        "decode_tok_s": (produced - 1) / (end - first) if end > first else 0.0,
    }


def _concurrent(llm: LLM, prompts: list[list[int]], tokens: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = [{} for _ in prompts]
    barrier = threading.Barrier(len(prompts) + 1)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = _stream(llm, prompts[i], tokens)
        except Exception as exc:
            results[i] = {"error": repr(exc)}

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    done = [r for r in results if "tokens" in r]
    total = sum(r["tokens"] for r in done)
    return {
        "streams": len(prompts),
        "failed": len(prompts) - len(done),
        "tokens": total,
        "seconds": seconds,
        "tok_s": total / seconds,
        "ttft_s_median": statistics.median(r["ttft_s"] for r in done) if done else None,
        "per_stream_decode_tok_s_median": statistics.median(r["decode_tok_s"] for r in done)
        if done
        else None,
    }


def _summary(timed: list[tuple[int, float]], **extra: Any) -> dict[str, Any]:
    rates = [tokens / seconds for tokens, seconds in timed]
    return {
        "runs": len(timed),
        "tokens": timed[-1][0],
        "seconds": [round(s, 4) for _, s in timed],
        "tok_s": statistics.median(rates),
        **extra,
    }


def _brief(result: dict[str, Any]) -> str:
    if "error" in result:
        return result["error"]
    return f"{result.get('tok_s', 0):.1f} tok/s ({result.get('tokens')} tokens)"


def _ratios(results: dict[str, Any]) -> dict[str, float]:
    sections = results["sections"]
    ratios = {}
    for path in ("dynamic", "static", "batch", "batch_sampling"):
        raw, ours = sections.get(f"raw_{path}", {}), sections.get(f"llmflow_{path}", {})
        if "tok_s" in raw and "tok_s" in ours:
            ratios[f"{path}_llmflow_over_raw"] = ours["tok_s"] / raw["tok_s"]
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny model on the CPU: checks every path quickly"
    )
    parser.add_argument(
        "--paths",
        default="static,batch,dynamic,batch_sampling",
        help="in this order; any of: static, batch, dynamic, batch_sampling",
    )
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--page-size", type=int, default=32, help="continuous-batching cache block size")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each single-stream path")
    parser.add_argument("--budget-s", type=float, default=520, help="skip sections that start after this")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/transformers_gpu.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    bench = Bench(args)
    static = {"static_cache": True} if args.tiny else {}  # the CUDA default is the static path
    sections = {
        "dynamic": [
            ("raw_dynamic", lambda: bench.raw_generate(1)),
            ("llmflow_dynamic", lambda: bench.llmflow_single(1, static_cache=False)),
        ],
        "static": [
            ("raw_static", lambda: bench.raw_generate(args.runs, cache_implementation="static")),
            ("llmflow_static", lambda: bench.llmflow_single(args.runs, **static)),
        ],
        "batch": [
            ("raw_batch", bench.raw_generate_batch),
            ("llmflow_batch", lambda: bench.llmflow_concurrent(sampling=False)),
        ],
        "batch_sampling": [
            ("llmflow_batch_sampling", lambda: bench.llmflow_concurrent(sampling=True)),
            ("raw_batch_sampling", lambda: bench.raw_generate_batch(sampling=True)),
        ],
    }
    for path in args.paths.split(","):
        for name, fn in sections[path]:
            bench.section(name, fn)
    bench.results["ratios"] = _ratios(bench.results)
    bench.save()
    print(
        json.dumps(
            {
                "setup": bench.results["setup"],
                "ratios": bench.results["ratios"],
                **{k: _brief(v) for k, v in bench.results["sections"].items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
