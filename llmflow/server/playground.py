"""The web playground: a chat page at `/` that streams from the server's own OpenAI routes.

The page is static files (`static/`, no build step). It holds no secret, so its routes are public
even when the server has an API key; the page asks for the key when the API answers 401. A strict
Content-Security-Policy keeps it from loading or contacting anything but this server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

from llmflow.server.state import ServerState

STATIC_DIR = Path(__file__).with_name("static")

#: where the page's assets are served; `/` serves index.html
ASSET_PREFIX = "/playground/"

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def page_files() -> dict[str, Path]:
    """URL path -> file: `/` for the page, `/playground/<name>` for each asset."""
    files = {"/": STATIC_DIR / "index.html"}
    for path in sorted(STATIC_DIR.iterdir()):
        if path.suffix in _MEDIA_TYPES and path.name != "index.html":
            files[ASSET_PREFIX + path.name] = path
    return files


def _file_endpoint(file: Path) -> Callable[[], Awaitable[FileResponse]]:
    media_type = _MEDIA_TYPES[file.suffix]

    async def endpoint() -> FileResponse:
        return FileResponse(file, media_type=media_type, headers=_HEADERS)

    return endpoint


def mount(app: FastAPI, state: ServerState) -> None:
    """Serve the page on `app`, one GET route per file (a fixed set, so that the API-key exemption
    names exact paths): its paths need no API key and are counted by name in the metrics."""
    files = page_files()
    for url_path, file in files.items():
        name = f"playground:{file.name}"
        app.add_api_route(url_path, _file_endpoint(file), methods=["GET"], include_in_schema=False, name=name)
    state.public_paths.update(files)
    state.known_paths.update(files)
