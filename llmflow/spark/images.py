"""An image column on Spark: each cell (binary, or text: base64, a data URI, or a file's path)
read and checked in its own step on the executors, as `llmflow batch` reads one in process
(`llmflow.media.values.image_cell`), then handed to the model as its `images`. A row whose image
cannot be read gets that error as its result, and the model answers nothing for it.

pandas is imported here at the top: Spark reads a pandas UDF's kind from its type hints."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from llmflow.mlflow.inputs import IMAGES
from llmflow.mlflow.struct_result import FINISH_ERROR

if TYPE_CHECKING:
    from pyspark.sql import Column

#: the read step's result: the checked bytes (null for an empty cell) and the error ("" if none)
READ_TYPE = "data binary, error string"


def answer_with_image(
    udf: Callable[..., Column],
    given: dict[str, Column],
    image: Column | str,
    folder: str | None,
    *,
    struct: bool = True,
) -> Column:
    """`udf`'s answers for the text inputs `given` with each row's image. A row whose image
    cannot be read gets its error record (its text inputs left out: the model only refuses it),
    or, for a text result (`struct=False`), fails its task with that error, as any bad row does."""
    from pyspark.sql import functions as F

    name = image if isinstance(image, str) else "image"
    read = image_reader(name, folder, fail=not struct)(F.col(image) if isinstance(image, str) else image)
    images = F.when(read["data"].isNotNull(), F.array(read["data"])).alias(IMAGES)
    if not struct:  # the read step has failed the task on a bad image already
        return udf(F.struct(*[column.alias(field) for field, column in given.items()], images))
    failed = read["error"] != ""
    inputs = [F.when(~failed, column).alias(field) for field, column in given.items()]
    out = udf(F.struct(*inputs, images))
    error = F.struct(
        F.lit("").alias("answer"),
        F.lit(FINISH_ERROR).alias("finish_reason"),
        F.lit(0).alias("prompt_tokens"),
        F.lit(0).alias("completion_tokens"),
        read["error"].alias("error"),
    )
    return F.when(failed, error).otherwise(out)


def image_reader(column: str, folder: str | None, *, fail: bool = False) -> Any:
    """A pandas UDF of an image column to `READ_TYPE`; errors name `column` (`fail`: raised,
    failing the task), relative paths start at `folder`."""
    from pyspark.sql.functions import pandas_udf

    def read_images(cells: pd.Series) -> pd.DataFrame:
        return read_cells(cells, column, folder, fail=fail)

    return pandas_udf(read_images, READ_TYPE)  # type: ignore[call-overload]


def read_cells(cells: pd.Series, column: str, folder: str | None, *, fail: bool = False) -> pd.DataFrame:
    from llmflow.errors import LlmflowError
    from llmflow.media.values import image_cell

    data: list[bytes | None] = []
    errors: list[str] = []
    for cell in cells:
        try:
            data.append(image_cell(cell, column, folder))
            errors.append("")
        except LlmflowError as exc:
            if fail:
                raise
            data.append(None)
            errors.append(str(exc))
    return pd.DataFrame({"data": data, "error": errors})
