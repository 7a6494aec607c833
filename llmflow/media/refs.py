"""An image as a protocol names it (a chat `image_url`, a Responses `input_image`, an Anthropic
`image` source) to one `ImageRef`: the protocol readers call these, so every protocol accepts
the same URLs and refuses the same ones."""

from __future__ import annotations

from typing import Any

from llmflow.errors import InvalidImage
from llmflow.types import ImageRef

#: the URL schemes an image may be given by
SCHEMES = ("data:", "http://", "https://")


def image_ref(url: Any, field: str) -> ImageRef:
    """A data URI or an `http(s)` URL; anything else is refused, naming `field`."""
    if not isinstance(url, str) or not url:
        raise InvalidImage(field, "must be a data URI (data:image/png;base64,...) or an http(s) URL")
    if not url[:8].lower().startswith(SCHEMES):
        raise InvalidImage(field, "must be a data URI (data:image/png;base64,...) or an http(s) URL")
    return ImageRef(field, url)


def base64_ref(data: Any, field: str) -> ImageRef:
    """Bare base64 text (Anthropic's `base64` source); its media type is not trusted."""
    if not isinstance(data, str) or not data:
        raise InvalidImage(field, "must be the image's bytes in base64")
    return ImageRef(field, base64=data)
