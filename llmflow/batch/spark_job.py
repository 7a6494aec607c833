"""`llmflow batch --spark MASTER`: the same job as a Spark plan, unchanged on a cluster.

Rows keep their input order: they are numbered as read, range-partitioned by that number
(before the model runs, so Spark's sampling pass never calls the model) and written in
partition order. Spark shows its own console progress bar, one tick per finished partition.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmflow.batch.columns import InputColumns, input_columns
from llmflow.batch.files import image_folder, read_spark, write_spark
from llmflow.batch.local import VALUE
from llmflow.batch.summary import BatchSummary
from llmflow.mlflow.signature import JSON_SCHEMA
from llmflow.mlflow.struct_result import FINISH_ERROR, RESULT_FIELDS
from llmflow.spark.udf import answer_udf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: partitions per core of the cluster (defaultParallelism) when --partitions is not given
PARTITIONS_PER_CORE = 4
_ROW = "__llmflow_row"
_RESULT = "__llmflow_result"


def run_spark(
    spark: SparkSession,
    model_uri: str,
    frame: DataFrame,
    columns: InputColumns,
    params: Mapping[str, Any],
    *,
    partitions: int | None = None,
    threads: int | None = None,
    image_folder: str | None = None,
) -> DataFrame:
    """The plan: input columns (result-named ones replaced) then the result fields.
    `image_folder`: where an image column's relative file paths start."""
    from pyspark.sql import functions as F

    count = partitions or spark.sparkContext.defaultParallelism * PARTITIONS_PER_CORE
    numbered = frame.withColumn(_ROW, F.monotonically_increasing_id()).repartitionByRange(count, _ROW)
    rest = {k: v for k, v in params.items() if k != JSON_SCHEMA}
    schema = params.get(JSON_SCHEMA) or None
    answer = answer_udf(
        spark, model_uri, params=rest, threads=threads, json_schema=schema, image_folder=image_folder
    )
    named = columns.as_model_input()
    result = answer(named.get("prompt"), messages=named.get("messages"), image=columns.image)
    scored = numbered.withColumn(_RESULT, result)
    names = [*RESULT_FIELDS, VALUE] if schema else list(RESULT_FIELDS)
    kept = [F.col(f"`{c}`") for c in frame.columns if c not in names]
    fields = [F.col(f"{_RESULT}.{name}").alias(name) for name in names]
    return scored.select(*kept, *fields)


def run_spark_job(
    spark: SparkSession,
    model_uri: str,
    input_path: str,
    output_path: str,
    params: Mapping[str, Any],
    *,
    prompt_column: str | None = None,
    image_column: str | None = None,
    partitions: int | None = None,
    threads: int | None = None,
    overwrite: bool = False,
) -> BatchSummary:
    """Read, answer, write; then count what was written (read back, not recomputed)."""
    frame = read_spark(spark, input_path)
    columns = input_columns(frame.columns, prompt_column, image_column)
    start = time.perf_counter()
    plan = run_spark(
        spark,
        model_uri,
        frame,
        columns,
        params,
        partitions=partitions,
        threads=threads,
        image_folder=image_folder(input_path),
    )
    write_spark(plan, output_path, overwrite=overwrite)
    seconds = time.perf_counter() - start
    return _summary(read_spark(spark, output_path), seconds)


def _summary(written: DataFrame, seconds: float) -> BatchSummary:
    from pyspark.sql import functions as F

    row = written.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum((F.col("finish_reason") == FINISH_ERROR).cast("int")).alias("errors"),
        F.sum(F.col("prompt_tokens").cast("long")).alias("prompt_tokens"),
        F.sum(F.col("completion_tokens").cast("long")).alias("completion_tokens"),
    ).first()
    return BatchSummary(
        rows=row["rows"],
        errors=row["errors"] or 0,
        prompt_tokens=row["prompt_tokens"] or 0,
        completion_tokens=row["completion_tokens"] or 0,
        seconds=seconds,
    )
