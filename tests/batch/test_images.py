"""`llmflow batch --image-column NAME`: each row's image from a column (bytes, base64, a data URI
or a file path relative to the input file), in this process. A row whose image cannot be read
gets that error, as any bad row does; the other rows are answered as without the column.

The embedded model reads no images: its image rows are refused by field. The tiny vision model
(`vision_model`, saved as an MLflow model) reads them: each image adds at least its tokens to the
row's prompt, which is how these tests know the image reached the model."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from llmflow.batch.columns import InputColumns, input_columns
from llmflow.cli import app
from llmflow.errors import BatchFileError
from llmflow.model_files import default_model_path
from tests.media.images import data_uri, image_bytes

PNG = image_bytes(size=(64, 64))
PARAMS = ["-p", "temperature=0", "-p", "max_tokens=2", "--threads", "1"]
PROMPT = "Describe it."


def _batch(model: str | Path, source: Path, out: Path, *extra: str) -> pd.DataFrame:
    result = CliRunner().invoke(app, ["batch", str(model), str(source), str(out), *PARAMS, *extra])
    assert result.exit_code == 0, result.output
    return pd.read_json(out, lines=True, dtype=False) if out.suffix == ".jsonl" else pd.read_parquet(out)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    """A folder with an input file's pictures: a PNG in `pics/`, a text file that is no image."""
    folder = tmp_path_factory.mktemp("batch-images")
    (folder / "pics").mkdir()
    (folder / "pics" / "a.png").write_bytes(PNG)
    (folder / "pics" / "notes.txt").write_text("not an image")
    return folder


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_text_only_model_refuses_image_rows_and_answers_the_others(pictures):
    rows = [
        {"id": 0, "prompt": PROMPT, "photo": None},
        {"id": 1, "prompt": PROMPT, "photo": "pics/a.png"},
        {"id": 2, "prompt": PROMPT, "photo": "pics/missing.png"},
    ]
    source = _write_jsonl(pictures / "text-only.jsonl", rows)
    out = _batch(default_model_path(), source, pictures / "text-only-out.jsonl", "--image-column", "photo")
    assert out["id"].tolist() == [0, 1, 2]
    assert out["photo"].tolist()[1:] == ["pics/a.png", "pics/missing.png"]  # the input, as it was
    assert out.loc[0, "error"] == "" and out.loc[0, "completion_tokens"] >= 1
    assert out.loc[1, "finish_reason"] == "error" and "takes no images" in out.loc[1, "error"]
    assert "input.images[0]" in out.loc[1, "error"]
    assert out.loc[2, "finish_reason"] == "error"
    assert "photo: there is no image file 'pics/missing.png'" in out.loc[2, "error"]


def test_an_image_column_that_is_not_there_fails_before_any_row(pictures):
    source = _write_jsonl(pictures / "no-column.jsonl", [{"prompt": PROMPT}])
    result = CliRunner().invoke(
        app,
        [
            "batch",
            str(default_model_path()),
            str(source),
            str(pictures / "x.jsonl"),
            "--image-column",
            "photo",
        ],
    )
    assert result.exit_code != 0
    assert "no image column 'photo'" in result.output


def test_the_image_column_is_its_own_column():
    assert input_columns(["prompt", "photo"], None, "photo") == InputColumns("prompt", None, "photo")
    with pytest.raises(BatchFileError, match="also the prompt"):
        input_columns(["q", "photo"], "q", "q")


def test_every_form_of_image_cell_reaches_the_model(vision_saved, pictures):
    saved, image_tokens = vision_saved
    b64 = base64.b64encode(PNG).decode()
    cells = [
        None,
        "pics/a.png",
        str(pictures / "pics" / "a.png"),
        b64,
        data_uri(PNG),
        "pics/missing.png",
        "pics/notes.txt",
        "data:image/png;base64,@@@",
    ]
    source = _write_jsonl(
        pictures / "vision.jsonl", [{"id": i, "prompt": PROMPT, "photo": c} for i, c in enumerate(cells)]
    )
    out = _batch(saved, source, pictures / "vision-out.jsonl", "--image-column", "photo")
    assert out["id"].tolist() == list(range(len(cells)))
    plain = out.loc[0, "prompt_tokens"]
    assert out.loc[0, "error"] == ""
    seen = out.loc[1:4]
    assert (seen["error"] == "").all(), seen["error"].tolist()
    assert seen["prompt_tokens"].nunique() == 1 and seen["prompt_tokens"].iloc[0] >= plain + image_tokens
    assert (seen["completion_tokens"] >= 1).all()
    assert "there is no image file 'pics/missing.png'" in out.loc[5, "error"]
    assert "photo: is not an image in a supported format" in out.loc[6, "error"]
    assert "photo: is not valid base64" in out.loc[7, "error"]
    assert (out.loc[5:, "finish_reason"] == "error").all() and (out.loc[5:, "prompt_tokens"] == 0).all()


def test_a_binary_parquet_column_reaches_the_model(vision_saved, pictures):
    saved, image_tokens = vision_saved
    source = pictures / "vision.parquet"
    pd.DataFrame({"prompt": [PROMPT] * 3, "image": [None, PNG, b"junk"]}).to_parquet(source)
    out = _batch(saved, source, pictures / "vision-out.parquet", "--image-column", "image")
    assert out.loc[1, "prompt_tokens"] >= out.loc[0, "prompt_tokens"] + image_tokens
    assert out.loc[1, "error"] == "" and out.loc[2, "finish_reason"] == "error"
    assert "image: is not an image" in out.loc[2, "error"]
    assert out["image"].tolist()[1] == PNG  # the input's bytes written back as they were


def test_a_gguf_and_its_projector_given_as_an_engine_option(vision_model, pictures):
    """`--engine-option mmproj=...` loads a vision GGUF's projector: no logged model needed."""
    from tests.media.images import need_mtmd

    need_mtmd()
    folder, summary = vision_model
    source = _write_jsonl(
        pictures / "gguf.jsonl", [{"prompt": PROMPT, "photo": p} for p in (None, "pics/a.png")]
    )
    options = [
        "--engine-option",
        f"mmproj={folder / 'mmproj-vision-f16.gguf'}",
        "--engine-option",
        "n_ctx=512",
    ]
    out = _batch(
        folder / "vision-f16.gguf", source, pictures / "gguf-out.jsonl", "--image-column", "photo", *options
    )
    assert (out["error"] == "").all(), out["error"].tolist()
    assert out.loc[1, "prompt_tokens"] >= out.loc[0, "prompt_tokens"] + summary["image_tokens"]


def test_engine_options_for_a_logged_model_are_refused_by_name(vision_saved, pictures):
    saved, _ = vision_saved
    source = _write_jsonl(pictures / "logged.jsonl", [{"prompt": PROMPT}])
    result = CliRunner().invoke(
        app,
        [
            "batch",
            str(saved),
            str(source),
            str(pictures / "logged-out.jsonl"),
            "--engine-option",
            "n_ctx=512",
        ],
    )
    assert result.exit_code != 0
    assert "--engine-option" in result.output and "logged model" in result.output
