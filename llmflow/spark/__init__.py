"""llmflow models on Apache Spark, through MLflow's own `mlflow.pyfunc.spark_udf`.

    from llmflow.spark import answer_udf
    answer = answer_udf(spark, "models:/smollm2/1", params={"temperature": 0, "max_tokens": 64})
    scored = df.withColumn("result", answer("prompt"))   # struct: answer, finish_reason, ...

pyspark is the `spark` extra (`pip install 'llmflow[spark]'`) and needs Java 17; it is imported
only when these functions run.
"""

from __future__ import annotations

from llmflow.mlflow.struct_result import FINISH_ERROR, RESULT_FIELDS, SPARK_RESULT_TYPE
from llmflow.spark.udf import answer_udf, threads_per_task

__all__ = ["FINISH_ERROR", "RESULT_FIELDS", "SPARK_RESULT_TYPE", "answer_udf", "threads_per_task"]
