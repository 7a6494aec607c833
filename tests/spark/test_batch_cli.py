"""`llmflow batch`: the same file of prompts answered in this process and on local Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from llmflow.batch.files import read_spark, write_spark
from llmflow.cli import app
from llmflow.cli.batch import parse_params
from llmflow.model_files import default_model_path
from tests.spark.conftest import MASTER, SPARK_ENV, require_spark

PARAMS = ["--params", "temperature=0", "-p", "max_tokens=8"]
ONE_THREAD = ["--threads", "1"]  # in-process on a busy machine: see conftest.in_process
RESULTS = ["answer", "finish_reason", "prompt_tokens", "completion_tokens", "error"]
ROWS = [
    {"id": 0, "prompt": "Hello!"},
    {"id": 1, "prompt": "Name a fruit."},
    {"id": 2, "prompt": ""},
    {"id": 3, "messages": [{"role": "user", "content": "Say hi."}]},
    {"id": 4, "prompt": "What is 2 + 2?"},
]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "prompts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


@pytest.fixture(scope="module")
def local_answers(prompts: Path) -> pd.DataFrame:
    """`llmflow batch GGUF prompts.jsonl answers.csv`, in this process."""
    out = prompts.with_name("answers.csv")
    command = ["batch", str(default_model_path()), str(prompts), str(out), *PARAMS, *ONE_THREAD]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == str(out)
    return pd.read_csv(out, keep_default_na=False)


def test_in_process_batch_writes_answers_finish_reasons_and_token_counts(local_answers):
    assert list(local_answers.columns) == ["id", "prompt", "messages", *RESULTS]
    assert local_answers["id"].tolist() == [0, 1, 2, 3, 4]
    good = local_answers[local_answers["id"] != 2]
    assert (good["answer"].str.len() > 0).all()
    assert set(good["finish_reason"]) <= {"stop", "length"}
    assert (good["prompt_tokens"] > 0).all() and good["completion_tokens"].between(1, 8).all()
    assert (good["error"] == "").all()
    bad = local_answers[local_answers["id"] == 2].iloc[0]
    assert bad["finish_reason"] == "error" and "empty" in bad["error"]
    assert json.loads(local_answers.loc[3, "messages"]) == ROWS[3]["messages"]  # CSV: JSON text


def test_spark_batch_writes_the_same_answers(prompts, local_answers, tmp_path):
    """`llmflow batch ... --spark local[2]` as a user runs it: its own process, its own Spark."""
    require_spark()
    out = tmp_path / "answers.parquet"
    log = tmp_path / "loads.jsonl"
    env = {**os.environ, **SPARK_ENV, "LLMFLOW_LOAD_LOG": str(log)}
    command = [
        sys.executable,
        "-m",
        "llmflow",
        "batch",
        str(default_model_path()),
        str(prompts),
        str(out),
        "--spark",
        MASTER,
        "--partitions",
        "3",
        *PARAMS,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5 rows (1 with an error)" in done.stderr

    spark_answers = pd.read_parquet(out)  # a directory of part files, in input order
    assert spark_answers["id"].tolist() == [0, 1, 2, 3, 4]
    columns = ["id", *RESULTS]
    assert spark_answers[columns].to_dict("records") == local_answers[columns].to_dict("records")
    loads = Counter(e["pid"] for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "load")
    assert loads and all(n == 1 for n in loads.values())


def test_spark_reads_and_writes_csv_like_pandas(spark, tmp_path):
    """Quotes, commas and newlines inside cells; a messages column written as JSON text."""
    source = tmp_path / "in.csv"
    prompts = ['Say "hi", then stop.', "Line one\nline two", "NA"]
    pd.DataFrame({"prompt": prompts}).to_csv(source, index=False)
    frame = read_spark(spark, str(source))
    assert [r["prompt"] for r in frame.collect()] == prompts

    schema = "id long, messages array<struct<role string, content string>>"
    chat = spark.createDataFrame([(1, ROWS[3]["messages"])], schema)
    out = tmp_path / "out.csv"
    write_spark(chat.coalesce(1), str(out), overwrite=False)
    [part] = out.glob("part-*.csv")
    assert json.loads(pd.read_csv(part)["messages"][0]) == ROWS[3]["messages"]


def test_csv_in_jsonl_out(tmp_path):
    source = tmp_path / "in.csv"
    pd.DataFrame({"question": ["Hi!", "NA"]}).to_csv(source, index=False)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "batch",
            str(default_model_path()),
            str(source),
            str(out),
            "--prompt-column",
            "question",
            "-p",
            "max_tokens=2",
            *ONE_THREAD,
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["question"] for r in rows] == ["Hi!", "NA"]  # "NA" is a prompt, not a missing value
    assert all(r["error"] == "" and r["completion_tokens"] >= 1 for r in rows)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["prompts.txt", "out.csv"], "unknown format .txt"),
        (["prompts.jsonl", "out.xlsx"], "unknown format .xlsx"),
        (["missing.jsonl", "out.csv"], "no input file"),
        (["prompts.jsonl", "exists.csv"], "exists already"),
        (["prompts.jsonl", "out.csv", "--prompt-column", "question"], "no column 'question'"),
        (["prompts.jsonl", "out.csv", "-p", "max_tokens"], "name=value"),
        (["prompts.jsonl", "out.csv", "-p", "max_tokens=-1"], "max_tokens"),
        (["prompts.jsonl", "out.csv", "-p", "tempreature=0"], "tempreature"),
    ],
)
def test_bad_batch_input_exits_with_a_message(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    Path("prompts.jsonl").write_text('{"prompt": "Hi"}\n')
    Path("prompts.txt").write_text("Hi\n")
    Path("exists.csv").write_text("x\n")
    result = CliRunner().invoke(app, ["batch", str(default_model_path()), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert not Path("out.csv").exists()


def test_params_are_json_or_text():
    assert parse_params(["temperature=0", 'stop_sequences=["a", "b"]', "system_prompt=Be brief."]) == {
        "temperature": 0,
        "stop_sequences": ["a", "b"],
        "system_prompt": "Be brief.",
    }


def test_json_schema_gives_a_typed_value_column(prompts, tmp_path):
    """In process, to jsonl: each answer parsed into `value`; a row cut at max_tokens is an
    error row, never half-parsed."""
    schema = {
        "type": "object",
        "properties": {
            "word": {"enum": ["hi", "hello", "hey"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["word", "n"],
        "additionalProperties": False,
    }
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    out = tmp_path / "typed.jsonl"
    command = ["batch", str(default_model_path()), str(prompts), str(out), "--json-schema", str(schema_file),
               "-p", "max_tokens=24", *ONE_THREAD]  # fmt: skip
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    answers = pd.read_json(out, lines=True)
    assert list(answers.columns)[-1] == "value"
    for _, row in answers.iterrows():
        if row["error"]:
            assert row["value"] is None or pd.isna(row["value"])
            continue
        assert row["value"]["word"] in ("hi", "hello", "hey") and 0 <= row["value"]["n"] <= 9
    cut = tmp_path / "cut.jsonl"
    command = [*command[:3], str(cut), *command[4:7], "max_tokens=2", *ONE_THREAD]
    assert CliRunner().invoke(app, command).exit_code == 0
    cut_rows = pd.read_json(cut, lines=True)
    assert (cut_rows["finish_reason"] == "error").all()
    assert cut_rows[cut_rows["id"] != 2]["error"].str.contains("max_tokens").all()
