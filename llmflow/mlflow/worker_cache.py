"""Loading a logged model inside Spark: once per Python worker, with threads that fit the task.

MLflow's `spark_udf` loads the model again for every task when Spark runs in local mode (on a
cluster its cache keeps one copy per Python worker). Inside a Spark task, llmflow keeps the LLM
it loaded in the worker process and gives the same one to every later task of that worker, so a
job pays one engine load per worker, not one per partition. Outside Spark, every load is a fresh
LLM, as before. A Python worker runs one task at a time, so sharing its LLM is safe.

Threads: an executor runs `cores / spark.task.cpus` tasks at once, each in its own Python worker;
an engine that uses every core in each of them oversubscribes the CPU. In a Spark task the engine
gets `LLMFLOW_THREADS_PER_TASK` threads when that is set (`llmflow.spark.answer_udf` sets it to
`cores // concurrent tasks`), else `spark.task.cpus`; a thread count in the model's
`threads` or `engine_options` (for example through `spark_udf(..., model_config=...)`) always
wins.

`LLMFLOW_LOAD_LOG=<file>` appends one JSON line per load or reuse (pid, seconds, threads): how
tests and benchmarks count engine loads per executor process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmflow.load_spec import thread_option
from llmflow.mlflow.config import ModelSpec

if TYPE_CHECKING:
    from llmflow.llm import LLM

THREADS_ENV = "LLMFLOW_THREADS_PER_TASK"
LOAD_LOG_ENV = "LLMFLOW_LOAD_LOG"

_log = logging.getLogger(__name__)
#: the LLMs this Spark Python worker has loaded, by spec, weights and threads
_worker_llms: dict[str, LLM] = {}


def load_llm(spec: ModelSpec, weights: Path) -> LLM:
    """The LLM for `spec`: shared by the tasks of a Spark Python worker, fresh elsewhere."""
    task = _spark_task()
    if task is None:
        return _load(spec, weights, spark_task=False)
    spec = _with_task_threads(spec, task)
    key = json.dumps([spec.to_config(), str(weights)], sort_keys=True)
    llm = _worker_llms.get(key)
    if llm is None:
        llm = _worker_llms[key] = _load(spec, weights, spark_task=True)
    else:
        _record("reuse", spec, 0.0, spark_task=True)
    return llm


def task_threads(task: Any) -> int:
    """Threads for one engine in this task: `LLMFLOW_THREADS_PER_TASK`, else spark.task.cpus."""
    value = os.environ.get(THREADS_ENV)
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            _log.warning("ignoring %s=%r: not a whole number", THREADS_ENV, value)
    cpus = getattr(task, "cpus", None)
    return max(1, int(cpus())) if cpus is not None else 1


def _with_task_threads(spec: ModelSpec, task: Any) -> ModelSpec:
    """The task's threads, unless the spec names a thread count (engine options name theirs)."""
    if spec.threads is not None:
        return spec
    return spec.model_copy(update={"threads": task_threads(task)})


def _spark_task() -> Any:
    """PySpark's TaskContext while this process runs a Spark task, else None."""
    if "pyspark" not in sys.modules:  # never import Spark where it is not already running
        return None
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    return TaskContext.get()


def _load(spec: ModelSpec, weights: Path, *, spark_task: bool) -> LLM:
    start = time.perf_counter()
    llm = spec.load_llm(weights)
    _record("load", spec, time.perf_counter() - start, spark_task=spark_task)
    return llm


def _record(event: str, spec: ModelSpec, seconds: float, *, spark_task: bool) -> None:
    option = thread_option(spec.engine)
    threads = None if option is None else spec.engine_options_for(spec.engine).get(option)
    _log.info("%s %s in pid %d (%.2f s, threads %s)", event, spec.model_name, os.getpid(), seconds, threads)
    path = os.environ.get(LOAD_LOG_ENV)
    if not path:
        return
    line = json.dumps(
        {
            "event": event,
            "pid": os.getpid(),
            "model": spec.model_name,
            "seconds": round(seconds, 4),
            "threads": threads,
            "spark_task": spark_task,
        }
    )
    with open(path, "a", encoding="utf-8") as log:  # one short append per line: atomic enough
        log.write(line + "\n")
