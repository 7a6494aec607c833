"""Batch throughput: in-process `predict` against Spark `local[2]` through `spark_udf`.

The same saved model (the embedded SmolLM2, greedy) answers the same prompts both ways.
In-process: one `predict(..., params={"result": "struct"})` call over every row, the engine on
all usable cores. Spark: `llmflow.spark.answer_udf` over `--partitions` partitions: the first
job pays for starting the Python workers and loading the engine in each; then `--rounds` rounds
alternate an in-process run and a Spark job that reuses the workers (the ratio is taken round by
round). Engine loads are counted per executor process (LLMFLOW_LOAD_LOG). A third Spark job
gives every task all cores (what `spark_udf` does without llmflow's thread setting), to show
what oversubscribing the CPU costs. Answers are compared row by row.

    SPARK_LOCAL_IP=127.0.0.1 python -m benchmarks.bench_spark --prompts 64 --max-tokens 64 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd

import llmflow.mlflow
from llmflow.engines.llama_cpp import usable_cores
from llmflow.mlflow.worker_cache import LOAD_LOG_ENV
from llmflow.spark import answer_udf, threads_per_task
from llmflow.spark.session import start_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import Recording, paired_ratios, spread

TOPICS = ["the sea", "mountains", "coffee", "trains", "music", "rain", "cities", "bees"]
FORMS = [
    "Tell me about {}.",
    "Write two sentences about {}.",
    "What is interesting about {}?",
    "Describe {} to a child.",
    "Give three facts about {}.",
    "Why do people like {}?",
    "Write a short poem about {}.",
    "What would you ask an expert on {}?",
]


def prompts(count: int) -> list[str]:
    every = [form.format(topic) for form in FORMS for topic in TOPICS]
    return [every[i % len(every)] for i in range(count)]


def rates(rows: int, tokens: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 3),
        "output_tokens_per_s": round(tokens / seconds, 2),
        "output_tokens": tokens,
    }


def run_in_process(model_dir: str, questions: list[str], params: dict[str, Any]) -> tuple[dict, list]:
    start = time.perf_counter()
    model = mlflow.pyfunc.load_model(model_dir)
    loaded = time.perf_counter() - start
    model.predict(pd.DataFrame({"prompt": questions[:1]}), params={**params, "max_tokens": 4})  # warm
    start = time.perf_counter()
    records = model.predict(pd.DataFrame({"prompt": questions}), params={**params, "result": "struct"})
    seconds = time.perf_counter() - start
    llm = llmflow.mlflow.find_llm(model)
    threads = llm.engine.options.n_threads if llm is not None else None
    if llm is not None:
        llm.close()
    tokens = sum(r["completion_tokens"] for r in records)
    result = {"load_seconds": round(loaded, 3), "threads": threads, **rates(len(questions), tokens, seconds)}
    return result, [r["answer"] for r in records]


def run_spark_job(
    spark, model_dir: str, questions: list[str], params: dict, partitions: int, threads: int | None, log: Path
) -> tuple[dict, list[str]]:
    """One Spark job over every prompt; engine loads and reuses of this job from the load log."""
    log.unlink(missing_ok=True)
    answer = answer_udf(spark, model_dir, params=params, threads=threads, extra_env={LOAD_LOG_ENV: str(log)})
    frame = spark.createDataFrame([(i, q) for i, q in enumerate(questions)], ["id", "prompt"])
    scored = frame.repartition(partitions).withColumn("r", answer("prompt")).select("id", "r.*")
    start = time.perf_counter()
    rows = scored.collect()
    seconds = time.perf_counter() - start
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    loads = Counter(e["pid"] for e in events if e["event"] == "load")
    result = {
        **rates(len(rows), sum(r["completion_tokens"] for r in rows), seconds),
        "tasks": len(events),
        "executor_processes": len({e["pid"] for e in events}),
        "engine_loads_per_process": {str(pid): n for pid, n in sorted(loads.items())},
        "engine_reuses": sum(e["event"] == "reuse" for e in events),
        "engine_load_seconds": [e["seconds"] for e in events if e["event"] == "load"],
        "threads_per_task": sorted({e["threads"] for e in events}),
    }
    by_id = sorted(rows, key=lambda r: r["id"])
    return result, [r["answer"] for r in by_id]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--skip-oversubscribed", action="store_true", help="no all-cores-per-task job")
    parser.add_argument("--rounds", type=int, default=5, help="alternated in-process and warm Spark runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/spark.json"))
    args = parser.parse_args()
    recording = Recording.begin("spark")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

    questions = prompts(args.prompts)
    params = {"temperature": 0.0, "max_tokens": args.max_tokens}
    samples: dict[str, list[Any]] = {"in_process": [], "spark_warm_job": []}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(Path(tmp, "model"))
        llmflow.mlflow.save_model(model_dir, by_reference=True)
        _, local_answers = run_in_process(model_dir, questions, params)  # warm-up, and the answers to match
        start = time.perf_counter()
        spark = start_session(args.master, "llmflow bench_spark")
        spark.sparkContext.setLogLevel("ERROR")
        session_seconds = time.perf_counter() - start
        log = Path(tmp, "loads.jsonl")
        first, first_answers = run_spark_job(spark, model_dir, questions, params, args.partitions, None, log)
        answers_equal = first_answers == local_answers
        for r in range(args.rounds):
            order = ["in_process", "spark_warm_job"] if r % 2 == 0 else ["spark_warm_job", "in_process"]
            for name in order:
                if name == "in_process":
                    result, answers = run_in_process(model_dir, questions, params)
                else:
                    result, answers = run_spark_job(
                        spark, model_dir, questions, params, args.partitions, None, log
                    )
                answers_equal = answers_equal and answers == local_answers
                samples[name].append(result)
                print(f"round {r + 1}/{args.rounds} {name}: {result}", file=sys.stderr)
        oversubscribed = None
        if not args.skip_oversubscribed:
            oversubscribed, answers = run_spark_job(
                spark, model_dir, questions, params, args.partitions, usable_cores(), log
            )
            answers_equal = answers_equal and answers == local_answers
        threads = threads_per_task(spark)
        spark.stop()

    def rows_per_s(name: str) -> list[float]:
        return [r["rows_per_s"] for r in samples[name]]

    config = {
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "master": args.master,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "cores": usable_cores(),
        "spark_threads_per_task": threads,
    }
    summary = {
        "spark_session_start_s": round(session_seconds, 3),
        "spark_first_job": first,
        "in_process_rows_per_s": spread(rows_per_s("in_process")),
        "spark_warm_job_rows_per_s": spread(rows_per_s("spark_warm_job")),
        "spark_warm_over_in_process_rows_per_s": paired_ratios(
            rows_per_s("spark_warm_job"), rows_per_s("in_process")
        ),
        "spark_all_cores_per_task": oversubscribed,
        "answers_equal": answers_equal,
    }
    recording.write(args.out, config=config, samples=samples, summary=summary)


if __name__ == "__main__":
    main()
