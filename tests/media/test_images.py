"""Reading image bytes: the format from the content, the limits before any pixel is decoded."""

from __future__ import annotations

import base64

import pytest

from llmflow.errors import InvalidImage
from llmflow.media.images import ImageLimits, inline_bytes, read_image
from llmflow.media.reader import ImageReader
from llmflow.types import Image, ImageRef, Message
from tests.media.images import bomb_png, data_uri, image_bytes


@pytest.mark.parametrize(
    ("fmt", "name"), [("PNG", "png"), ("JPEG", "jpeg"), ("WEBP", "webp"), ("GIF", "gif")]
)
def test_each_format_is_read_with_its_size(fmt, name):
    image = read_image(image_bytes(fmt, (9, 4)), "f", ImageLimits())
    assert (image.format, image.width, image.height, image.field) == (name, 9, 4, "f")


def test_the_format_comes_from_the_bytes_not_the_mime_type():
    ref = ImageRef("f", data_uri(image_bytes("PNG"), "image/jpeg"))
    assert read_image(inline_bytes(ref, ImageLimits()), "f", ImageLimits()).format == "png"


def test_base64_wrapped_over_lines_is_read():
    text = base64.encodebytes(image_bytes()).decode()  # 76 characters a line
    assert "\n" in text
    assert inline_bytes(ImageRef("f", base64=text), ImageLimits()) == image_bytes()


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        (ImageRef("f", "data:image/png;base64,not base64!"), "not valid base64"),
        (ImageRef("f", base64="%%%%"), "not valid base64"),
        (ImageRef("f", "data:image/png,rawbytes"), "must hold base64"),
        (ImageRef("f", "data:image/png;base64"), "must be a data URI"),
    ],
)
def test_inline_text_that_is_not_base64(ref, says):
    with pytest.raises(InvalidImage, match=says) as info:
        inline_bytes(ref, ImageLimits())
    assert info.value.problems[0].field == "f"


def test_too_many_bytes_are_refused_before_decoding():
    limits = ImageLimits(max_bytes=1000)
    with pytest.raises(InvalidImage, match="larger than 1000 bytes"):
        inline_bytes(ImageRef("f", data_uri(b"\0" * 2000)), limits)
    with pytest.raises(InvalidImage, match="larger than 1000 bytes"):
        read_image(b"\0" * 2000, "f", limits)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"hello, not an image", "not an image in a supported format"),
        (image_bytes("BMP"), "not an image in a supported format"),
        (image_bytes("PNG", (64, 64))[:80], "damaged image"),
    ],
)
def test_bytes_that_are_no_readable_image(data, says):
    with pytest.raises(InvalidImage, match=says):
        read_image(data, "f", ImageLimits())


def test_a_decompression_bomb_is_refused_from_its_header():
    data = bomb_png()
    assert len(data) < 1000
    with pytest.raises(InvalidImage, match="pixels"):
        read_image(data, "f", ImageLimits())


def test_the_pixel_limit_is_the_servers():
    with pytest.raises(InvalidImage, match="declares 200x100 pixels, more than 10000"):
        read_image(image_bytes("PNG", (200, 100)), "f", ImageLimits(max_pixels=10_000))


def test_reader_reads_inline_images_and_keeps_their_place():
    message = Message.of_parts("user", ["look: ", ImageRef("m.0", data_uri(image_bytes())), " there"])
    (read,) = ImageReader().read_now([message])
    assert read.content == "look:  there"
    assert isinstance(read.parts[1], Image) and read.parts[1].field == "m.0"
    assert [p for p in read.parts if isinstance(p, str)] == ["look: ", " there"]


def test_reader_refuses_urls_in_process_and_counts_images():
    with pytest.raises(InvalidImage, match="fetched only by a server") as info:
        ImageReader().read_now([Message.of_parts("user", [ImageRef("m.1", "https://example.com/a.png")])])
    assert info.value.problems[0].field == "m.1"
    refs = [ImageRef(f"m.{i}", data_uri(image_bytes())) for i in range(3)]
    with pytest.raises(InvalidImage, match="2 images at most") as info:
        ImageReader(ImageLimits(max_images=2)).read_now([Message.of_parts("user", refs)])
    assert info.value.problems[0].field == "m.2"


def test_same_image_same_hash():
    one = read_image(image_bytes(), "a", ImageLimits())
    two = read_image(image_bytes(), "b", ImageLimits())
    assert one.sha256 == two.sha256 and len(one.sha256) == 64
