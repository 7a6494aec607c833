"""llmflow models through MLflow's `spark_udf` on local Spark: same answers as in-process
`predict`, structured results, bad rows as values, and one engine load per Python worker."""

from __future__ import annotations

import json
from collections import Counter

import mlflow
import pandas as pd
import pytest

from llmflow.engines.llama_cpp import usable_cores
from llmflow.mlflow.worker_cache import LOAD_LOG_ENV
from llmflow.spark import FINISH_ERROR, RESULT_FIELDS, SPARK_RESULT_TYPE, answer_udf, threads_per_task
from llmflow.spark.udf import local_slots
from tests.mlflow.store import using

PROMPTS = [
    "Hello!",
    "What is the capital of France?",
    "Name a fruit.",
    "Say something kind.",
    "What is 2 + 2?",
    "Give me a color.",
    "Tell me a joke.",
    "What is MLflow?",
    "Count to three.",
    "Name an animal.",
    "What is rain?",
    "Write one word.",
    "Describe the sea.",
]
CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi there!"}]


def sixteen_rows() -> list[dict]:
    """13 prompts, one conversation, one empty prompt and one row with neither."""
    rows = [{"id": i, "prompt": p, "messages": None} for i, p in enumerate(PROMPTS)]
    rows.append({"id": 13, "prompt": None, "messages": CHAT})
    rows.append({"id": 14, "prompt": "", "messages": None})
    rows.append({"id": 15, "prompt": None, "messages": None})
    return rows


def spark_frame(spark, rows: list[dict]):
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    message = StructType([StructField("role", StringType()), StructField("content", StringType())])
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("prompt", StringType()),
            StructField("messages", ArrayType(message)),
        ]
    )
    return spark.createDataFrame(rows, schema)


def test_struct_results_equal_in_process_predict(spark, spark_model, in_process):
    rows = sixteen_rows()
    with using(spark_model.store):
        answer = answer_udf(spark, spark_model.uri)
    scored = spark_frame(spark, rows).repartition(4).withColumn("r", answer("prompt", messages="messages"))
    results = sorted(scored.select("id", "r.*").collect(), key=lambda r: r["id"])
    assert [r["id"] for r in results] == list(range(16))

    good = pd.DataFrame(rows[:14])[["prompt", "messages"]]
    expected = in_process.predict(good, params={"result": "struct"})
    texts = in_process.predict(good)  # the plain text result: the same answers
    for row, want, text in zip(results[:14], expected, texts, strict=True):
        got = {name: row[name] for name in RESULT_FIELDS}
        assert got == want
        assert got["answer"] == text
        assert got["finish_reason"] in {"stop", "length"}
        assert got["prompt_tokens"] > 0 and 0 < got["completion_tokens"] <= 12
        assert got["error"] == ""

    empty, neither = results[14], results[15]
    for bad, words in ((empty, "empty"), (neither, "no `prompt` and no `messages`")):
        assert bad["finish_reason"] == FINISH_ERROR
        assert words in bad["error"]
        assert (bad["answer"], bad["prompt_tokens"], bad["completion_tokens"]) == ("", 0, 0)


def test_plain_spark_udf_as_in_the_readme(spark, spark_model, in_process):
    """MLflow's own `spark_udf`, nothing from llmflow on the driver but the result type: the
    signature's string output, and the struct result."""
    from pyspark.sql import functions as F

    params = {"max_tokens": 6}
    with using(spark_model.store):
        text = mlflow.pyfunc.spark_udf(spark, spark_model.uri, params=params)
        struct = mlflow.pyfunc.spark_udf(
            spark,
            spark_model.uri,
            result_type=SPARK_RESULT_TYPE,
            env_manager="local",
            params={**params, "result": "struct"},
        )
    frame = spark.createDataFrame([(p,) for p in PROMPTS[:4]], ["prompt"]).coalesce(1)
    scored = frame.withColumn("text", text(F.struct("prompt"))).withColumn("r", struct(F.struct("prompt")))
    rows = scored.select("*", "r.*").drop("r").collect()
    expected = in_process.predict(pd.DataFrame({"prompt": PROMPTS[:4]}), params=params)
    assert [r["text"] for r in rows] == [r["answer"] for r in rows] == expected
    assert all(r["completion_tokens"] <= 6 and r["error"] == "" for r in rows)


def test_the_engine_loads_once_per_python_worker(spark, spark_model, tmp_path):
    """8 tasks over local[2]'s Python workers: each worker loads the engine at most once and
    every other task reuses it; the result struct is computed once per row (one model call
    per task, though its fields are selected one by one)."""
    log = tmp_path / "loads.jsonl"
    with using(spark_model.store):
        answer = answer_udf(
            spark, spark_model.uri, params={"max_tokens": 2}, extra_env={LOAD_LOG_ENV: str(log)}
        )
    frame = spark.createDataFrame([(p,) for p in PROMPTS[:8] * 2], ["prompt"]).repartition(8)
    fields = frame.withColumn("r", answer("prompt")).select("prompt", "r.answer", "r.completion_tokens")
    assert len(fields.collect()) == 16

    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(events) == 8, events  # one model load (or reuse) per task, not per struct field
    pids = {e["pid"] for e in events}
    assert len(pids) < 8  # Python workers ran several tasks each
    loads = Counter(e["pid"] for e in events if e["event"] == "load")
    assert all(n == 1 for n in loads.values()), events  # never a second load in a worker
    assert all(e["spark_task"] and e["threads"] == threads_per_task(spark) for e in events)


def test_threads_per_task_share_the_cores(spark):
    assert threads_per_task(spark) == max(1, usable_cores() // 2)  # local[2]: two tasks at once


@pytest.mark.parametrize(
    ("master", "slots"),
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[4, 3]", 4),
        ("local[*]", usable_cores()),
        ("yarn", None),
        ("spark://host:7077", None),
    ],
)
def test_local_slots(master, slots):
    assert local_slots(master) == slots


def test_messages_as_an_array_of_structs(spark, spark_model, in_process):
    from pyspark.sql import functions as F

    frame = spark_frame(spark, sixteen_rows()[13:14])
    with using(spark_model.store):
        answer = answer_udf(spark, spark_model.uri, result="text")
    [row] = frame.select(answer(messages=F.col("messages")).alias("answer")).collect()
    assert row["answer"] == in_process.predict({"messages": CHAT})[0]


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def test_json_schema_gives_typed_columns_and_cut_rows_as_errors(spark, spark_model):
    """An extraction job over a table returns a table: `value` typed by the schema; a row whose
    JSON did not close within max_tokens is an error value, never half-parsed."""
    from pyspark.sql import types as T

    rows = [{"id": 0, "prompt": "Describe Ann, 31."}, {"id": 1, "prompt": "Describe Bo, 7."}]
    frame = spark.createDataFrame(rows)
    with using(spark_model.store):
        answer = answer_udf(spark, spark_model.uri, json_schema=PERSON, params={"max_tokens": 48})
        cut = answer_udf(spark, spark_model.uri, json_schema=PERSON, params={"max_tokens": 3})
    scored = frame.withColumn("r", answer("prompt")).withColumn("c", cut("prompt"))
    value_type = scored.schema["r"].dataType["value"].dataType
    assert value_type["age"].dataType == T.LongType()
    assert value_type["tags"].dataType == T.ArrayType(T.StringType())
    for row in scored.orderBy("id").collect():
        if row["r"]["error"] == "":
            value = row["r"]["value"]
            assert isinstance(value["name"], str) and 0 <= value["age"] <= 120
            assert set(value["tags"]) <= {"a", "b"}
        assert row["c"]["finish_reason"] == FINISH_ERROR and "max_tokens" in row["c"]["error"]
        assert row["c"]["value"] is None
