"""Prompt files in and answer files out: Parquet, CSV or JSON lines, chosen by extension.

pandas reads and writes single files for the in-process path; Spark reads files or directories
and writes a directory of part files (its own layout, readable by pandas, Spark and DuckDB).
Both read an empty CSV cell as a missing value, and nothing else ("NA" stays text).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from llmflow.errors import BatchFileError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "json", ".ndjson": "json",
           ".json": "json"}
#: CSV as pandas writes it: quotes doubled, newlines inside quoted cells
_SPARK_CSV = {"header": True, "multiLine": True, "escape": '"'}


def file_format(path: str) -> str:
    """"parquet", "csv" or "json" (JSON lines), from the extension of `path`."""
    suffix = PurePosixPath(path.rstrip("/")).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        raise BatchFileError(
            f"{path!r}: unknown format {suffix or '(no extension)'}; use .parquet, .csv or .jsonl"
        )
    return fmt


def is_local(path: str) -> bool:
    """A path on this machine (not s3://, dbfs:/, hdfs://...)."""
    return ":/" not in path or path.startswith("file:")


def check_output(path: str, *, overwrite: bool) -> None:
    file_format(path)
    if not overwrite and is_local(path) and Path(path.removeprefix("file:")).exists():
        raise BatchFileError(f"{path!r} exists already; pass --overwrite to replace it")


def read_frame(path: str) -> pd.DataFrame:
    """A local file as a DataFrame with missing cells as None (MLflow's schema check refuses NaN)."""
    import pandas as pd

    fmt = file_format(path)
    if not Path(path).exists():
        raise BatchFileError(f"there is no input file at {path!r}")
    if fmt == "parquet":
        frame = pd.read_parquet(path)
    elif fmt == "csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    else:
        frame = pd.read_json(path, lines=True, dtype=False, convert_dates=False)
    frame = frame.astype(object)
    return frame.where(frame.notna(), None)


def write_frame(frame: pd.DataFrame, path: str) -> None:
    fmt = file_format(path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        frame.to_parquet(path, index=False)
    elif fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)


def read_spark(spark: SparkSession, path: str) -> DataFrame:
    fmt = file_format(path)
    options: dict[str, Any] = _SPARK_CSV if fmt == "csv" else {}
    return spark.read.format(fmt).options(**options).load(path)


def write_spark(frame: DataFrame, path: str, *, overwrite: bool) -> None:
    fmt = file_format(path)
    options: dict[str, Any] = _SPARK_CSV if fmt == "csv" else {}
    frame.write.format(fmt).options(**options).mode("overwrite" if overwrite else "error").save(path)
