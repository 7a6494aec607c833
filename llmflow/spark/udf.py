"""A Spark column function around `mlflow.pyfunc.spark_udf` for llmflow models.

What it adds to a plain `spark_udf` call: the struct result type and its `result` param, the
engine's thread count per task (`cores // concurrent tasks` on a local master, so `local[N]`
does not oversubscribe the CPU), input passed as one struct column, and an image column. Passing
one struct matters: `spark_udf("prompt")` fills the model's other optional input, `messages`,
with NaN, which MLflow's own schema check then refuses.

An image column is read in its own step first (`llmflow.spark.images`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from llmflow.engines.llama_cpp import usable_cores
from llmflow.mlflow.signature import JSON_SCHEMA, RESULT, RESULT_STRUCT, RESULT_TEXT
from llmflow.mlflow.struct_result import RESULT_FIELDS, SPARK_RESULT_TYPE
from llmflow.mlflow.worker_cache import THREADS_ENV
from llmflow.spark.schema_types import spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

_LOCAL_MASTER = re.compile(r"local(?:\[(?P<slots>\*|\d+)(?:,\s*\d+)?\])?")


def answer_udf(
    spark: SparkSession,
    model_uri: str,
    *,
    result: str = RESULT_STRUCT,
    params: Mapping[str, Any] | None = None,
    threads: int | None = None,
    env_manager: str = "local",
    extra_env: Mapping[str, str] | None = None,
    json_schema: Mapping[str, Any] | str | None = None,
    image_folder: str | None = None,
) -> Callable[..., Column]:
    """A function from a `prompt` (or `messages=`) column, and optionally an `image=` column,
    to the model's answers.

    `result="struct"` gives SPARK_RESULT_TYPE (answer, finish_reason, prompt_tokens,
    completion_tokens, error; a bad row is an error value), `result="text"` the answer string
    (a bad row fails the task). `params` are the model's params (sampling, `system_prompt`);
    `threads` overrides the engine threads per task. With `json_schema` (struct result only),
    every answer follows the schema and the struct gains `value`: the answer parsed into the
    Spark type of the schema (null for an error row; an answer cut at max_tokens is one).
    `image_folder`: where an image column's relative file paths start (on the executors)."""
    import mlflow

    if result not in (RESULT_STRUCT, RESULT_TEXT):
        raise ValueError(f"result must be {RESULT_STRUCT!r} or {RESULT_TEXT!r}, not {result!r}")
    params = dict(params or {})
    value_type = None
    if json_schema is not None:
        if result != RESULT_STRUCT:
            raise ValueError("json_schema needs result='struct' (typed columns beside the error value)")
        schema = json.loads(json_schema) if isinstance(json_schema, str) else dict(json_schema)
        params[JSON_SCHEMA] = json.dumps(schema)
        value_type = spark_type(schema)
    env = {THREADS_ENV: str(threads or threads_per_task(spark)), **(extra_env or {})}
    udf = mlflow.pyfunc.spark_udf(
        spark,
        model_uri,
        result_type=SPARK_RESULT_TYPE if result == RESULT_STRUCT else "string",
        params={**params, RESULT: result},
        env_manager=env_manager,
        extra_env=env,
    )

    def answer(
        prompt: Column | str | None = None,
        *,
        messages: Column | str | None = None,
        image: Column | str | None = None,
    ) -> Column:
        """The answer column for a `prompt` column and/or a `messages` column (an array of
        {role, content} structs); a row uses one of them. `image`: a column of one image per row
        (binary, or text: base64, a data URI or a file path), for the user turn; null: none."""
        from pyspark.sql import functions as F

        inputs = {"prompt": prompt, "messages": messages}
        given = {
            name: F.col(column) if isinstance(column, str) else column
            for name, column in inputs.items()
            if column is not None
        }
        if not given:
            raise ValueError("give a prompt column, a messages= column, or both")
        if image is None:
            out = udf(F.struct(*[column.alias(name) for name, column in given.items()]))
        else:
            from llmflow.spark.images import answer_with_image

            out = answer_with_image(udf, given, image, image_folder, struct=result == RESULT_STRUCT)
        if value_type is None:
            return out
        value = F.when(out["error"] == "", F.from_json(out["answer"], value_type))
        return F.struct(*[out[name] for name in RESULT_FIELDS], value.alias("value"))

    return answer


def threads_per_task(spark: SparkSession) -> int:
    """Engine threads for one task: the machine's cores shared by the concurrent tasks of a
    local master; `spark.task.cpus` (what Spark reserves per task) on a cluster."""
    task_cpus = max(1, int(spark.conf.get("spark.task.cpus", "1") or 1))
    slots = local_slots(spark.conf.get("spark.master", "") or "")
    if slots is None:
        return task_cpus
    concurrent = max(1, slots // task_cpus)
    return max(1, usable_cores() // concurrent)


def local_slots(master: str) -> int | None:
    """How many tasks a local master runs at once (`local` 1, `local[N]` N, `local[*]` all
    cores), or None for a cluster master."""
    match = _LOCAL_MASTER.fullmatch(master.strip())
    if match is None:
        return None
    slots = match["slots"]
    if slots is None:
        return 1
    return usable_cores() if slots == "*" else max(1, int(slots))
