"""Prompt files in and answer files out: Parquet, CSV or JSON lines, chosen by extension.

pandas reads and writes single files for the in-process path; Spark reads files or directories
and writes a directory of part files (its own layout, readable by pandas, Spark and DuckDB).
Both read an empty CSV cell as a missing value, and nothing else ("NA" stays text); both write
list and struct cells (a `messages` column) to CSV as JSON text.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from llmflow.errors import BatchFileError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
}
#: CSV as pandas writes it: quotes doubled, newlines inside quoted cells
_SPARK_CSV = {"header": True, "multiLine": True, "escape": '"'}


def file_format(path: str) -> str:
    """ "parquet", "csv" or "json" (JSON lines), from the extension of `path`."""
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


def image_folder(path: str) -> str | None:
    """Where an image column's relative file paths start: the input's folder (for a directory
    of parts, the directory's own folder), when the input is on this machine."""
    if not is_local(path):
        return None
    return str(Path(path.removeprefix("file:")).resolve().parent)


def check_input(path: str) -> None:
    file_format(path)
    if is_local(path) and not Path(path.removeprefix("file:")).exists():
        raise BatchFileError(f"there is no input file at {path!r}")


def check_output(path: str, *, overwrite: bool) -> None:
    file_format(path)
    if not overwrite and is_local(path) and Path(path.removeprefix("file:")).exists():
        raise BatchFileError(f"{path!r} exists already; pass --overwrite to replace it")


def read_frame(path: str) -> pd.DataFrame:
    """A local file as a DataFrame with missing cells as None (MLflow's schema check refuses NaN)."""
    import pandas as pd

    check_input(path)
    fmt = file_format(path)
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
        frame.map(_json_cell).to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)


def read_spark(spark: SparkSession, path: str) -> DataFrame:
    fmt = file_format(path)
    options: dict[str, Any] = _SPARK_CSV if fmt == "csv" else {}
    return spark.read.format(fmt).options(**options).load(path)


def write_spark(frame: DataFrame, path: str, *, overwrite: bool) -> None:
    fmt = file_format(path)
    options: dict[str, Any] = _SPARK_CSV if fmt == "csv" else {}
    if fmt == "csv":
        frame = frame.select(*[_json_column(frame, name) for name in frame.columns])
    frame.write.format(fmt).options(**options).mode("overwrite" if overwrite else "error").save(path)


def _json_cell(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # a numpy array, as pandas holds a Parquet list cell
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, default=_plain)
    return value


def _plain(value: Any) -> Any:
    """numpy values inside a list cell, for json.dumps."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _json_column(frame: DataFrame, name: str) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    column = F.col(f"`{name}`")
    if isinstance(frame.schema[name].dataType, (ArrayType, MapType, StructType)):
        return F.to_json(column).alias(name)
    return column
