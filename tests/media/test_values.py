"""An image given as a value (`llmflow.media.values`): a model's `images` item, read lazily, and
a table's cell (bytes, a data URI, base64 text or a file path), read and checked at once."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from llmflow.errors import InvalidImage
from llmflow.media.images import ImageLimits, inline_bytes
from llmflow.media.values import image_cell, image_input
from llmflow.types import ImageRef
from tests.media.images import data_uri, image_bytes

PNG = image_bytes()
B64 = base64.b64encode(PNG).decode()


@pytest.mark.parametrize(
    "value",
    [PNG, bytearray(PNG), np.bytes_(PNG), B64, f"  {B64}\n", data_uri(PNG), np.str_(data_uri(PNG))],
)
def test_an_input_item_is_bytes_base64_or_a_data_uri(value):
    ref = image_input(value, "images[0]")
    assert ref.field == "images[0]" and not ref.is_remote
    assert inline_bytes(ref, ImageLimits()) == PNG


def test_an_input_url_is_kept_to_be_refused_as_a_url():
    assert image_input("https://example.com/a.png", "images[0]") == ImageRef(
        "images[0]", "https://example.com/a.png"
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"", "is empty"),
        ("  ", "is empty"),
        (7, "not int"),
        (None, "not NoneType"),
        ({"url": "x"}, "not dict"),
        ("ftp://example.com/a.png", "data URI"),
    ],
)
def test_a_bad_input_item_names_its_field(value, says):
    with pytest.raises(InvalidImage, match=says) as caught:
        image_input(value, "input.images[1]")
    assert caught.value.param == "input.images[1]"


def test_bad_base64_is_refused_when_read():
    with pytest.raises(InvalidImage, match="not valid base64") as caught:
        inline_bytes(image_input("not base64!", "images[0]"), ImageLimits())
    assert caught.value.param == "images[0]"


@pytest.mark.parametrize("value", [PNG, np.bytes_(PNG), B64, data_uri(PNG)])
def test_a_cell_is_bytes_base64_or_a_data_uri(value):
    assert image_cell(value, "photo") == PNG


@pytest.mark.parametrize("value", [None, float("nan"), "", "   "])
def test_an_empty_cell_is_no_image(value):
    assert image_cell(value, "photo") is None


def test_a_cell_names_a_file_relative_to_the_folder_or_absolute(tmp_path):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(PNG)
    assert image_cell("pics/a.png", "photo", tmp_path) == PNG
    assert image_cell(str(tmp_path / "pics" / "a.png"), "photo") == PNG
    (tmp_path / "abcd").write_bytes(PNG)  # a file whose name is also base64 text: the file wins
    assert image_cell("abcd", "photo", tmp_path) == PNG


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("missing.png", "there is no image file 'missing.png' (relative to the input file's folder)"),
        ("x" * 201, "there is no image file 'xxxxx"),
        (base64.b64encode(b"plain text").decode(), "not an image in a supported format"),
        (data_uri(b"plain text"), "not an image in a supported format"),
        (b"plain text", "not an image in a supported format"),
        ("data:image/png,raw", "must hold base64"),
        ("https://example.com/a.png", "not fetched here"),
        (7, "not int"),
    ],
)
def test_a_bad_cell_names_its_column(value, says, tmp_path):
    with pytest.raises(InvalidImage) as caught:
        image_cell(value, "photo", tmp_path)
    assert caught.value.param == "photo"
    assert says in str(caught.value)


def test_a_cell_file_over_the_limit_is_refused_unread(tmp_path):
    (tmp_path / "big.png").write_bytes(PNG)
    with pytest.raises(InvalidImage, match="larger than 10 bytes"):
        image_cell("big.png", "photo", tmp_path, ImageLimits(max_bytes=10))


def test_a_folder_is_not_an_image_file(tmp_path):
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(InvalidImage, match="no image file"):
        image_cell("dir.png", "photo", tmp_path)
