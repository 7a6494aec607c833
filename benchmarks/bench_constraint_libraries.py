"""Which constraint library for structured output: llguidance, xgrammar and outlines-core on the
embedded model's vocabulary (49,152 tokens) and a sample of JSONSchemaBench's schemas.

For each schema and library: does it compile (and if not, the library's reason), how long the
first compile takes (cold) and a second one of the same schema (cached: llmflow's cache over
llguidance, xgrammar's own compiler cache; outlines-core has none), and a seeded random walk
through the token mask (no model: each step picks an allowed token, preferring ones that close
strings and containers) that measures the mask's cost per token and whether the finished text
validates against the schema (`jsonschema`). Each library runs in a worker process of its own,
so a schema that takes longer than `--timeout-s` to compile is counted as a timeout.

    pip install -e '.[constraint-compare]'
    python -m benchmarks.bench_constraint_libraries --corpus PATH/TO/jsonschemabench.git
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, spread

DATASETS = (
    "Github_easy", "Github_medium", "Github_hard", "Glaiveai2K", "Kubernetes",
    "Snowplow", "JsonSchemaStore", "WashingtonPost",
)  # fmt: skip
LIBRARIES = ("llguidance", "xgrammar", "outlines_core")
CLOSERS = b'"}],'


# -- the corpus (read from a git directory of guidance-ai/jsonschemabench) ------------------------
def corpus(git_dir: Path, per_dataset: int) -> list[tuple[str, str]]:
    """(name, schema text) of the first `per_dataset` schemas of each dataset, by file name."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True
        ).stdout

    chosen = []
    for dataset in DATASETS:
        names = sorted(git("ls-tree", "--name-only", f"HEAD:data/{dataset}").split())[:per_dataset]
        chosen += [(f"{dataset}/{n}", git("show", f"HEAD:data/{dataset}/{n}")) for n in names]
    return chosen


# -- the libraries (in a worker process) ----------------------------------------------------------
class Library:
    """compile(schema text) -> a matcher factory; mask(matcher, words); advance; finished."""

    def __init__(self, vocabulary: Any):
        self.vocabulary = vocabulary
        self.n = len(vocabulary.tokens)


class Llguidance(Library):
    def __init__(self, vocabulary: Any):
        super().__init__(vocabulary)
        from llmflow.constraints.compiler import ConstraintCompiler

        self.compiler = ConstraintCompiler(vocabulary)
        self.compiler._lltokenizer()  # built once per model, outside the compile timing

    def compile(self, schema: str) -> Any:
        from llmflow.constraints import Constraint

        return self.compiler.compile(Constraint.json_schema(schema))

    def start(self, compiled: Any) -> Any:
        return compiled.start()

    def allowed(self, matcher: Any) -> Any:
        return matcher.allowed()[: self.n]

    def advance(self, matcher: Any, token: int) -> None:
        matcher.advance(token)


class Xgrammar(Library):
    def __init__(self, vocabulary: Any):
        super().__init__(vocabulary)
        import xgrammar as xgr

        self.xgr = xgr
        tokens = [b"" if i in vocabulary.special_ids else t for i, t in enumerate(vocabulary.tokens)]
        info = xgr.TokenizerInfo(
            tokens, xgr.VocabType.RAW, vocab_size=self.n, stop_token_ids=sorted(vocabulary.eos_token_ids)
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=True)
        self.bitmask = xgr.allocate_token_bitmask(1, self.n)

    def compile(self, schema: str) -> Any:
        return self.compiler.compile_json_schema(
            schema, any_whitespace=False, separators=(", ", ": "), strict_mode=False
        )

    def start(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def allowed(self, matcher: Any) -> Any:
        import numpy as np

        matcher.fill_next_token_bitmask(self.bitmask)
        words = self.bitmask.numpy().view(np.uint8)
        return np.unpackbits(words, bitorder="little")[: self.n].view(bool)

    def advance(self, matcher: Any, token: int) -> None:
        if not matcher.accept_token(token):
            raise ValueError(f"xgrammar refused token {token}")


class OutlinesCore(Library):
    def __init__(self, vocabulary: Any):
        super().__init__(vocabulary)
        import numpy as np
        import outlines_core

        self.oc = outlines_core
        pieces: dict[bytes, list[int]] = {}
        for i, t in enumerate(vocabulary.tokens):
            if t and i not in vocabulary.special_ids:
                pieces.setdefault(t, []).append(i)
        self.vocab = outlines_core.Vocabulary(min(vocabulary.eos_token_ids), pieces)
        self.words = np.zeros((self.n + 31) // 32, dtype=np.int32)

    def compile(self, schema: str) -> Any:
        regex = self.oc.json_schema.build_regex_from_schema(schema, r"[ ]?")
        return self.oc.Index(regex, self.vocab)

    def start(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def allowed(self, matcher: Any) -> Any:
        import numpy as np

        matcher.write_mask_into(self.words.ctypes.data, self.words.size, 4)
        return np.unpackbits(self.words.view(np.uint8), bitorder="little")[: self.n].view(bool)

    def advance(self, matcher: Any, token: int) -> None:
        matcher.advance(token)


ADAPTERS = {"llguidance": Llguidance, "xgrammar": Xgrammar, "outlines_core": OutlinesCore}


def measure_one(lib: Library, schema: str, walk_tokens: int, seed: int) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        compiled = lib.compile(schema)
    except Exception as exc:  # every library's own error type: recorded as its reason
        return {"compiled": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    cold = time.perf_counter() - start
    start = time.perf_counter()
    lib.compile(schema)
    cached = time.perf_counter() - start
    result: dict[str, Any] = {
        "compiled": True,
        "compile_cold_ms": cold * 1e3,
        "compile_cached_ms": cached * 1e3,
    }
    result.update(walk(lib, compiled, json.loads(schema), walk_tokens, seed))
    return result


def walk(lib: Library, compiled: Any, schema: Any, max_steps: int, seed: int) -> dict[str, Any]:
    """A random walk through the mask; the text it ends with, validated."""
    import numpy as np

    rng = random.Random(seed)
    matcher = lib.start(compiled)
    eos = lib.vocabulary.eos_token_ids
    closing = np.array([any(c in t for c in CLOSERS) for t in lib.vocabulary.tokens])
    out: list[int] = []
    times = []
    finished = False
    try:
        for _ in range(max_steps):
            start = time.perf_counter()
            allowed = lib.allowed(matcher)
            times.append(time.perf_counter() - start)
            ids = np.flatnonzero(allowed)
            if len(ids) == 0:
                break
            enders = [i for i in ids if i in eos]
            if enders:
                finished = True
                break
            preferred = np.flatnonzero(allowed & closing)
            pool = preferred if len(preferred) and rng.random() < 0.7 else ids
            token = int(pool[rng.randrange(len(pool))])
            lib.advance(matcher, token)
            out.append(token)
    except Exception as exc:
        return {"walk_error": f"{type(exc).__name__}: {exc}"[:300], "mask_us": _median_us(times)}
    text = b"".join(lib.vocabulary.tokens[t] for t in out)
    return {
        "finished": finished,
        "valid": _valid(text, schema) if finished else None,
        "mask_us": _median_us(times),
    }


def _median_us(times: list[float]) -> float | None:
    return statistics.median(times) * 1e6 if times else None


def _valid(text: bytes, schema: Any) -> bool:
    import jsonschema

    try:
        value = json.loads(text)
        jsonschema.validators.validator_for(schema)(schema).validate(value)
    except (ValueError, jsonschema.ValidationError):
        return False
    except jsonschema.SchemaError:
        return False
    return True


def worker(name: str, conn: Any, walk_tokens: int) -> None:
    from llmflow import LLM

    llm = LLM.load(engine="llama_cpp")
    lib = ADAPTERS[name](llm.engine.token_vocabulary())
    conn.send("ready")
    while True:
        item = conn.recv()
        if item is None:
            return
        index, schema = item
        conn.send(measure_one(lib, schema, walk_tokens, seed=index))


def run_library(name: str, schemas: list[tuple[str, str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    results = []
    process, conn = None, None
    for index, (schema_name, text) in enumerate(schemas):
        if process is None:
            conn, child = ctx.Pipe()
            process = ctx.Process(target=worker, args=(name, child, args.walk_tokens), daemon=True)
            process.start()
            assert conn.recv() == "ready"
        conn.send((index, text))
        if conn.poll(args.timeout_s):
            result = conn.recv()
        else:
            process.terminate()
            process.join()
            process = None
            result = {"compiled": False, "timeout": True, "error": f"no compile within {args.timeout_s} s"}
        results.append({"schema": schema_name, **result})
    if process is not None:
        conn.send(None)
        process.join()
    return results


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    compiled = [r for r in rows if r["compiled"]]
    finished = [r for r in compiled if r.get("finished")]
    return {
        "schemas": len(rows),
        "compiled_share": len(compiled) / len(rows),
        "timeouts": sum(1 for r in rows if r.get("timeout")),
        "walk_errors": sum(1 for r in compiled if r.get("walk_error")),
        "walks_finished_share": len(finished) / len(compiled) if compiled else None,
        "valid_share_of_finished": sum(1 for r in finished if r["valid"]) / len(finished)
        if finished
        else None,
        "compile_cold_ms": spread(r["compile_cold_ms"] for r in compiled),
        "compile_cached_ms": spread(r["compile_cached_ms"] for r in compiled),
        "mask_us_per_token": spread(r.get("mask_us") for r in compiled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        type=Path,
        default=os.environ.get("LLMFLOW_SCHEMA_CORPUS"),
        help="a git directory of guidance-ai/jsonschemabench (default: $LLMFLOW_SCHEMA_CORPUS)",
    )
    parser.add_argument("--per-dataset", type=int, default=10)
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--walk-tokens", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/constraint_libraries.json"))
    args = parser.parse_args()
    if args.corpus is None:
        parser.error("give --corpus or set LLMFLOW_SCHEMA_CORPUS")
    recording = Recording.begin("constraint_libraries")
    schemas = corpus(args.corpus, args.per_dataset)
    libraries = args.libraries.split(",")
    samples = {name: run_library(name, schemas, args) for name in libraries}
    summary = {name: summarise(rows) for name, rows in samples.items()}
    config = {
        "corpus": "guidance-ai/jsonschemabench",
        "datasets": list(DATASETS),
        "per_dataset": args.per_dataset,
        "timeout_s": args.timeout_s,
        "walk_tokens": args.walk_tokens,
        "vocabulary": "SmolLM2-135M-Instruct (49,152 tokens)",
        "versions": _versions(libraries),
    }
    recording.write(args.out, config=config, samples=samples, summary=summary)
    for name, s in summary.items():
        print(name, json.dumps(s))


def _versions(libraries: list[str]) -> dict[str, str]:
    from importlib import metadata

    names = {"outlines_core": "outlines-core"}
    return {lib: metadata.version(names.get(lib, lib)) for lib in libraries}


if __name__ == "__main__":
    main()
