"""An image given as a value rather than inside a protocol's message: an item of an MLflow model's
`images` input, or a cell of a batch's image column (`llmflow batch --image-column`, Spark). One
reading of every form, so that each surface accepts the same values and refuses the same ones:

- bytes, as they are (a Parquet or Spark binary column, what pandas gives for one);
- a data URI (`data:image/png;base64,...`);
- base64 text without a URI around it;
- only in a table's cell: a file's path, absolute or relative to the input file's folder. A model
  never opens files named by its callers (a served model would hand out its machine's files).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from llmflow.errors import InvalidImage
from llmflow.media.images import ImageLimits, inline_bytes, read_image
from llmflow.media.refs import SCHEMES, image_ref
from llmflow.types import ImageRef

#: base64 text, possibly wrapped over lines (what tells it from a file's name)
_BASE64 = re.compile(r"[A-Za-z0-9+/\s]+={0,2}\s*")
#: how much of a value an error repeats
_SHOWN = 60
_FORMS = "an image's bytes, base64 text or a data URI (data:image/png;base64,...)"
_CELL_FORMS = "an image's bytes, base64 text, a data URI, or an image file's path"


def image_input(value: Any, field: str) -> ImageRef:
    """An item of a model's `images` input, not read yet (so that a model that reads no images
    refuses it as such): bytes, a data URI or base64 text; an `http(s)` URL is kept so that it is
    refused as a URL. Anything else is an `InvalidImage` naming `field`."""
    value = _scalar(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        if not value:
            raise InvalidImage(field, "is empty: give " + _FORMS)
        return ImageRef(field, data=bytes(value))
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise InvalidImage(field, "is empty: give " + _FORMS)
        if ":" in text[:16]:  # a URI (base64 has no colon): a data URI, a URL, or refused
            return image_ref(text, field)
        return ImageRef(field, base64=text)
    raise InvalidImage(field, f"must be {_FORMS}, not {type(value).__name__}")


def image_cell(
    value: Any, field: str, folder: str | Path | None = None, limits: ImageLimits | None = None
) -> bytes | None:
    """A table cell's image as checked bytes (None for an empty cell: a row without an image).

    A text cell is a data URI, an existing file (`folder` resolves a relative path), or base64
    text, in that order; text that is none of these is refused as a file that does not exist.
    The bytes are checked as an image here, so that a batch's error names its column."""
    limits = limits or ImageLimits()
    value = _scalar(value)
    if value is None or (isinstance(value, float) and value != value):  # pandas' missing cell
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        data = _text_cell(text, field, folder, limits)
    else:
        raise InvalidImage(field, f"must be {_CELL_FORMS}, not {type(value).__name__}")
    if not data:
        raise InvalidImage(field, "is empty: give " + _CELL_FORMS)
    read_image(data, field, limits)
    return data


def _text_cell(text: str, field: str, folder: str | Path | None, limits: ImageLimits) -> bytes:
    lowered = text[:8].lower()
    if lowered.startswith("data:"):
        return inline_bytes(ImageRef(field, text), limits)
    if lowered.startswith(SCHEMES):
        raise InvalidImage(field, f"image URLs are not fetched here: give {_CELL_FORMS}")
    path = _existing_file(text, folder)
    if path is not None:
        return _read_file(path, field, limits)
    if _BASE64.fullmatch(text) and len("".join(text.split())) % 4 == 0:
        return inline_bytes(ImageRef(field, base64=text), limits)
    shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
    relative = folder is not None and not Path(text).is_absolute()
    where = " (relative to the input file's folder)" if relative else ""
    raise InvalidImage(field, f"there is no image file {shown!r}{where}; a cell is {_CELL_FORMS}")


def _existing_file(text: str, folder: str | Path | None) -> Path | None:
    path = Path(text).expanduser()
    if not path.is_absolute() and folder is not None:
        path = Path(folder) / path
    try:
        return path if path.is_file() else None
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no file
        return None


def _read_file(path: Path, field: str, limits: ImageLimits) -> bytes:
    try:
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise InvalidImage(field, f"the file {path.name!r} is larger than {limits.max_bytes} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise InvalidImage(field, f"the file {path.name!r} cannot be read: {exc.strerror or exc}") from None


def _scalar(value: Any) -> Any:
    """A numpy scalar (how pandas and MLflow may hold a cell) as the Python value."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value
