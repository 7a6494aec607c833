"""Images for tests, made on the spot: real ones in each format (Pillow), a decompression bomb
(a small PNG whose header declares a huge image), and a real HTTP server on 127.0.0.1 that
serves them, redirects, drips or sends too much."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (8, 6), color: tuple[int, int, int] = (200, 30, 60)
) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def need_mtmd() -> None:
    """Skip, saying why, when this llama.cpp build has no multimodal library (`mtmd`): the vision
    model's projector cannot load without it."""
    try:
        import llama_cpp.mtmd_cpp  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:
        pytest.skip(f"this llama.cpp build has no multimodal library (llama_cpp.mtmd_cpp): {exc}")


def vision_load_options(folder: Path) -> tuple[str, dict[str, Any]]:
    """The tiny vision model (the `vision_model` fixture's folder) as `LLM.load` and
    `llmflow.mlflow.save_model` take it: its GGUF, and the options that load its projector."""
    options = {"mmproj": str(folder / "mmproj-vision-f16.gguf"), "n_ctx": 512}
    return str(folder / "vision-f16.gguf"), {"engine": "llama_cpp", "engine_options": options}


def assert_loads_reading_images(saved: Path) -> None:
    """The llmflow model saved at `saved`, loaded back by MLflow, reads images."""
    import mlflow.pyfunc

    import llmflow.mlflow

    llm = llmflow.mlflow.find_llm(mlflow.pyfunc.load_model(str(saved)))
    try:
        assert llm.engine.input_modalities == ("text", "image")
    finally:
        llm.close()


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG of a few hundred bytes whose header declares `width` x `height` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    pixels = zlib.compress(b"\0" * 4096, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


class _Handler(BaseHTTPRequestHandler):
    """/image.png, /text, /missing (404), /redirect?to=URL (302), /loop (redirects to itself),
    /slow (drips a byte at a time), /big (more bytes than any test's limit, no length given)."""

    image = b""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        route = getattr(self, "_" + url.path.strip("/").replace(".", "_"), None)
        if route is None:
            self.send_error(404)
            return
        route(parse_qs(url.query))

    def _image_png(self, query: dict) -> None:
        self._send(200, self.image, "image/png")

    def _text(self, query: dict) -> None:
        self._send(200, b"not an image at all", "image/png")

    def _redirect(self, query: dict) -> None:
        self.send_response(302)
        self.send_header("Location", query["to"][0])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _loop(self, query: dict) -> None:
        self._redirect({"to": ["/loop"]})

    def _slow(self, query: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.image)))
        self.end_headers()
        try:
            for byte in self.image:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass  # the client gave up, as it should

    def _big(self, query: dict) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(64):
                self.wfile.write(b"\0" * 65536)
        except OSError:
            pass

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def image_server() -> Iterator[str]:
    """A server on 127.0.0.1 (its base URL, `http://127.0.0.1:PORT`), stopped on exit."""
    handler = type("Handler", (_Handler,), {"image": image_bytes()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
