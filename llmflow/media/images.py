"""Image bytes to a checked `Image`: the format from the content (Pillow's sniffing, never the
request's MIME type), within a byte limit and a pixel limit checked on the header before any
pixel is decoded (a small file may declare a huge image: a decompression bomb)."""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from dataclasses import dataclass

from llmflow.errors import InvalidImage
from llmflow.types import Image, ImageRef

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
#: Pillow's own default limit (`PIL.Image.MAX_IMAGE_PIXELS`, about 89 million pixels)
DEFAULT_MAX_PIXELS = 89_478_485
DEFAULT_MAX_IMAGES = 16
#: Pillow's format name -> llmflow's; only these are read (a GIF's first frame)
FORMATS = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp", "GIF": "gif"}


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What one image may be, and how many one request may hold."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_images: int = DEFAULT_MAX_IMAGES


def inline_bytes(ref: ImageRef, limits: ImageLimits) -> bytes:
    """The bytes given as they are, or of a data URI or of bare base64 text, refused by size
    before they are decoded."""
    if ref.data is not None:
        return ref.data  # read_image checks their size
    text = ref.base64 if ref.base64 is not None else _data_uri_payload(ref)
    text = "".join(text.split())  # base64 wrapped over lines is still base64
    if len(text) // 4 * 3 > limits.max_bytes + 2:
        raise InvalidImage(ref.field, f"is larger than {_size(limits.max_bytes)}, this server's limit")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidImage(ref.field, "is not valid base64") from None


def _data_uri_payload(ref: ImageRef) -> str:
    header, comma, payload = ref.url.partition(",")
    if not comma or not header.startswith("data:"):
        raise InvalidImage(ref.field, "must be a data URI (data:image/png;base64,...) or an http(s) URL")
    if not header.endswith(";base64"):
        raise InvalidImage(ref.field, "a data URI must hold base64 (data:image/png;base64,...)")
    return payload


def read_image(data: bytes, field: str, limits: ImageLimits) -> Image:
    """`data` checked as one image: a known format, within the limits, and whole (its first
    frame decodes)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    if len(data) > limits.max_bytes:
        raise InvalidImage(field, f"is larger than {_size(limits.max_bytes)}, this server's limit")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)  # our own limit decides
            with PILImage.open(io.BytesIO(data), formats=list(FORMATS)) as image:
                width, height = image.size
                _check_pixels(width, height, field, limits)
                image.load()  # the first frame: a truncated or corrupt image fails here
                kind = FORMATS[str(image.format)]
    except PILImage.DecompressionBombError:
        raise InvalidImage(field, f"has more than {limits.max_pixels} pixels, this server's limit") from None
    except UnidentifiedImageError:
        raise InvalidImage(
            field, f"is not an image in a supported format ({', '.join(FORMATS.values())})"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise InvalidImage(field, f"is a damaged image: {exc}") from None
    return Image(field, data, kind, width, height)


def _check_pixels(width: int, height: int, field: str, limits: ImageLimits) -> None:
    if width * height > limits.max_pixels:
        raise InvalidImage(
            field, f"declares {width}x{height} pixels, more than {limits.max_pixels} (this server's limit)"
        )


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB" if n >= 1024 * 1024 else f"{n} bytes"
