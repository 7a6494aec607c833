"""A real headless Chromium (Debian's `chromium`, driven by Playwright) against real servers on
127.0.0.1 around the embedded model. Skipped, with the reason, when no Chromium binary is found."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmflow.server import ServedModel
from llmflow.server.uvicorn_server import BackgroundServer
from tests.extras import need
from tests.server.conftest import TIMEOUT_S, running, wait_until_idle

#: a Chromium binary to use instead of the one found on PATH
CHROMIUM_ENV = "LLMFLOW_CHROMIUM"
#: a folder that receives the screenshots too (CI keeps it as a build artifact)
ARTIFACTS_ENV = "LLMFLOW_ARTIFACTS"

CHROMIUM_NAMES = ("chromium", "chromium-browser")
#: headless, and nothing that reaches out to the network on its own
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
#: Playwright's waits, in milliseconds: generous, a loaded 2-core machine decodes slowly
WAIT_MS = TIMEOUT_S * 1000


def find_chromium() -> str | None:
    configured = os.environ.get(CHROMIUM_ENV)
    if configured:
        return configured if Path(configured).is_file() else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(
            f"no Chromium binary: install Debian's `chromium` (apt-get install chromium) or set "
            f"{CHROMIUM_ENV}; `make test` installs it where it can"
        )
    sync_api = need("playwright.sync_api", "test")
    sync_api.expect.set_options(timeout=WAIT_MS)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def served(default_served) -> ServedModel:
    """The engine `llmflow serve` uses by default."""
    return default_served


@pytest.fixture(scope="package")
def server(served) -> Iterator[BackgroundServer]:
    """One server with default settings (no API key) for these tests."""
    with running(served) as background:
        yield background


@pytest.fixture
def start_server(served) -> Callable[..., Any]:
    """`with start_server(**settings) as server:` another server on the embedded model."""
    return lambda **settings: running(served, **settings)


@pytest.fixture
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        yield client


class PageLog:
    """What a page did: every request it made and every uncaught script error."""

    def __init__(self, page: Any):
        self.requests: list[Any] = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies the page posted to /v1/chat/completions, in order."""
        return [
            r.post_data_json
            for r in self.requests
            if r.method == "POST" and r.url.endswith("/chat/completions")
        ]


@pytest.fixture
def open_page(browser, server) -> Iterator[Callable[..., tuple[Any, PageLog]]]:
    """`page, log = open_page(url=None, viewport=DESKTOP)`: the playground in a fresh context (its
    own storage). On teardown: no script error happened and the page contacted only its server;
    no generation is left running."""
    opened: list[tuple[Any, PageLog, str]] = []

    def open_(url: str | None = None, viewport: dict[str, int] | None = None) -> tuple[Any, PageLog]:
        base = url or server.url
        context = browser.new_context(viewport=viewport or DESKTOP)
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        log = PageLog(page)
        page.goto(base + "/")
        opened.append((page, log, base))
        return page, log

    yield open_
    for page, log, base in opened:
        page.context.close()
        assert log.errors == [], log.errors
        foreign = [r.url for r in log.requests if not r.url.startswith((base + "/", "data:"))]
        assert foreign == [], f"the page contacted other origins: {foreign}"
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        wait_until_idle(client)


@pytest.fixture
def screenshot(tmp_path) -> Callable[[Any, str], Path]:
    """`screenshot(page, name)`: a PNG under the test's tmp dir, copied to $LLMFLOW_ARTIFACTS if set."""

    def take(page: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        artifacts = os.environ.get(ARTIFACTS_ENV)
        if artifacts:
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(artifacts) / path.name)
        return path

    return take
