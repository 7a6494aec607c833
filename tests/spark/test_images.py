"""An image column on Spark (`answer(prompt, image=...)`, `llmflow batch --spark --image-column`):
each row's image (binary, or text: base64, a data URI or a file path) read on the executors and
handed to the model; a row whose image cannot be read gets that error as its result.

The embedded model reads no images: its image rows are refused by field. The tiny vision model
(`vision_model`, saved as an MLflow model) reads them: each image adds at least its tokens to the
row's prompt, which is how these tests know the image reached the model."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pandas as pd
import pytest

from llmflow.spark import FINISH_ERROR, answer_udf
from tests.media.images import data_uri, image_bytes
from tests.mlflow.store import using
from tests.spark.conftest import MASTER, SPARK_ENV

PNG = image_bytes(size=(64, 64))
PARAMS = {"max_tokens": 2, "temperature": 0.0}
PROMPT = "Describe it."


def _frame(spark, images: list, kind: str):
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("prompt", StringType()),
            StructField("image", BinaryType() if kind == "binary" else StringType()),
        ]
    )
    return spark.createDataFrame([(i, PROMPT, image) for i, image in enumerate(images)], schema)


def _results(frame, answer) -> list[dict]:
    rows = frame.withColumn("result", answer("prompt", image="image")).orderBy("id").collect()
    return [row["result"].asDict() for row in rows]


def test_a_text_only_model_refuses_image_rows_on_spark(spark, spark_model):
    with using(spark_model.store):
        answer = answer_udf(spark, spark_model.uri, params=PARAMS, threads=1)
        first, second = _results(_frame(spark, [None, PNG], "binary"), answer)
    assert first["error"] == "" and first["completion_tokens"] >= 1
    assert second["finish_reason"] == FINISH_ERROR and "takes no images" in second["error"]


def test_a_text_result_fails_its_task_on_an_unreadable_image(spark, spark_model, tmp_path):
    """As any bad row does with the text result; the error names the column and the file."""
    with using(spark_model.store):
        answer = answer_udf(spark, spark_model.uri, result="text", params=PARAMS, threads=1)
        frame = _frame(spark, ["gone.png"], "text")
        with pytest.raises(Exception, match=r"image: there is no image file 'gone\.png'"):
            frame.withColumn("answer", answer("prompt", image="image")).collect()


def test_binary_and_path_columns_reach_the_model(spark, vision_saved, tmp_path):
    saved, image_tokens = vision_saved
    (tmp_path / "a.png").write_bytes(PNG)
    answer = answer_udf(spark, str(saved), params=PARAMS, threads=1, image_folder=str(tmp_path))
    plain, seen, junk = _results(_frame(spark, [None, PNG, b"junk"], "binary"), answer)
    assert plain["error"] == "" and seen["error"] == ""
    assert seen["prompt_tokens"] >= plain["prompt_tokens"] + image_tokens
    assert junk["finish_reason"] == FINISH_ERROR and "image: is not an image" in junk["error"]

    cells = ["a.png", str(tmp_path / "a.png"), base64.b64encode(PNG).decode(), data_uri(PNG), "gone.png"]
    *found, missing = _results(_frame(spark, cells, "text"), answer)
    assert [r["prompt_tokens"] for r in found] == [seen["prompt_tokens"]] * 4
    assert missing["finish_reason"] == FINISH_ERROR and missing["prompt_tokens"] == 0
    assert "there is no image file 'gone.png'" in missing["error"]


def test_spark_batch_reads_an_image_column_relative_to_the_input(vision_saved, tmp_path):
    """`llmflow batch ... --spark local[2] --image-column photo`, as a user runs it."""
    saved, image_tokens = vision_saved
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(PNG)
    source = tmp_path / "in.parquet"
    rows = {"id": [0, 1, 2], "prompt": [PROMPT] * 3, "photo": [None, "pics/a.png", "pics/gone.png"]}
    pd.DataFrame(rows).to_parquet(source)
    out = tmp_path / "out.parquet"
    command = [sys.executable, "-m", "llmflow", "batch", str(saved), str(source), str(out)]
    command += ["--spark", MASTER, "--image-column", "photo", "-p", "max_tokens=2", "-p", "temperature=0"]
    done = subprocess.run(
        command, env={**os.environ, **SPARK_ENV}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 rows (1 with an error)" in done.stderr
    answers = pd.read_parquet(out)
    assert answers["id"].tolist() == [0, 1, 2]
    assert answers.loc[1, "prompt_tokens"] >= answers.loc[0, "prompt_tokens"] + image_tokens
    assert "photo: there is no image file 'pics/gone.png'" in answers.loc[2, "error"]
