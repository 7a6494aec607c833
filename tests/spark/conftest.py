"""Local Spark (`local[2]`) for the Spark tests: one session and one logged model, stopped and
freed when the tests of this directory are done.

Spark needs Java 17: CI installs it (`.ci/run`); elsewhere the Spark tests skip with the reason.
Starting Spark takes about 5 s and the first job about 8 s more (workers start, the model loads).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import mlflow
import pytest

import llmflow.mlflow
from llmflow.spark.session import java_available
from tests.extras import need
from tests.mlflow.store import Store, using

MASTER = "local[2]"
#: the logged default: short answers, greedy, so Spark and in-process answers can be compared
DEFAULT_PARAMS = {"max_tokens": 12, "temperature": 0.0}
NO_JAVA = (
    "Spark needs Java 17 and there is no `java` here "
    "(apt-get install openjdk-17-jre-headless, as `make test` does where it can)"
)
#: the environment Spark's JVM and its Python workers inherit
SPARK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def require_spark() -> None:
    if not java_available():
        pytest.skip(NO_JAVA)
    need("pyspark", "spark")


@dataclass(frozen=True)
class LoggedModel:
    uri: str
    store: Store


@pytest.fixture(scope="package")
def spark() -> Iterator:
    require_spark()
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as env:
        for name, value in SPARK_ENV.items():
            env.setenv(name, value)
        session = (
            SparkSession.builder.master(MASTER)
            .appName("llmflow-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.python.worker.faulthandler.enabled", "true")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()


@pytest.fixture(scope="package")
def spark_model(tmp_path_factory: pytest.TempPathFactory) -> LoggedModel:
    """The embedded model logged to a real sqlite tracking store (weights copied in)."""
    store = Store.create(tmp_path_factory.mktemp("spark-mlflow"))
    with using(store), mlflow.start_run(experiment_id=store.experiment_id):
        info = llmflow.mlflow.log_model("model", default_params=DEFAULT_PARAMS, progress=False)
    return LoggedModel(info.model_uri, store)


@pytest.fixture(scope="package")
def in_process(spark_model: LoggedModel) -> Iterator:
    """The same logged model loaded in this process, the reference for Spark's answers. One
    thread, like each of local[2]'s tasks on 2 cores: on a busy machine llama.cpp on every core
    can be slower by an order of magnitude."""
    with using(spark_model.store):
        model = mlflow.pyfunc.load_model(spark_model.uri, model_config={"engine_options": {"n_threads": 1}})
    yield model
    llm = llmflow.mlflow.find_llm(model)
    if llm is not None:
        llm.close()
