"""Starting Spark for `llmflow batch --spark MASTER`, with a clear error when it cannot start."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmflow.errors import SparkUnavailable
from llmflow.spark.udf import local_slots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def start_session(master: str, app_name: str = "llmflow batch") -> SparkSession:
    """A Spark session on `master` (`local[2]`, `spark://host:7077`, `yarn`, ...) that shows
    Spark's console progress bar. Local workers run this Python (`PYSPARK_PYTHON` otherwise)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("--spark needs pyspark: pip install 'llmflow[spark]' (and Java 17)") from None
    if not java_available():
        raise SparkUnavailable(
            "Spark needs Java 17 and there is no `java` here: install a JRE "
            "(on Debian or Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    if local_slots(master) is not None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "true")
        .getOrCreate()
    )


def java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return True
    return shutil.which("java") is not None
