"""The page's routes, over plain HTTP: public even behind an API key (and only they), locked down
with a Content-Security-Policy, every asset it references served, nothing fetched from elsewhere."""

from __future__ import annotations

import re

import httpx
import pytest

from llmflow.server.playground import STATIC_DIR, page_files
from tests.server.conftest import TIMEOUT_S, metric, running

ASSETS = ["/playground/api.js", "/playground/app.js", "/playground/sse.js", "/playground/style.css"]


@pytest.fixture(scope="module")
def keyed(served):
    """A server with an API key, for the whole module."""
    with (
        running(served, api_key="k3y") as server,
        httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http,
    ):
        yield http


def test_the_page_and_its_assets_need_no_key(keyed):
    page = keyed.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "<title>llmflow playground</title>" in page.text
    for path in ASSETS:
        asset = keyed.get(path)
        assert asset.status_code == 200, path
        kind = "text/javascript" if path.endswith(".js") else "text/css"
        assert asset.headers["content-type"] == f"{kind}; charset=utf-8"


def test_only_the_page_is_public(keyed):
    for path in (
        "/v1/models",
        "/version",
        "/metrics",
        "/playground/",
        "/playground/missing.js",
        "/index.html",
    ):
        response = keyed.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert keyed.post("/").status_code == 405  # public, but the page only answers GET
    assert keyed.get("/v1/models", headers={"Authorization": "Bearer k3y"}).status_code == 200


def test_the_page_is_locked_to_its_own_server(http):
    headers = http.get("/").headers
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'"
    for directive in ("script-src", "style-src", "connect-src"):
        assert policy[directive] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert headers["x-content-type-options"] == "nosniff"


def test_every_referenced_asset_is_served_and_none_is_remote(http):
    served = set(page_files())
    assert served == {"/", *ASSETS}
    for path in sorted(STATIC_DIR.iterdir()):
        text = path.read_text()
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), (
            f"a remote URL in {path.name}"
        )
        for ref in re.findall(r'(?:src|href)="([^"]+)"', text):
            if not ref.startswith("data:"):
                assert "/" + ref in served, f"{path.name} references {ref}, which is not served"
        for module in re.findall(r'from "\./([^"]+)"', text):
            assert "/playground/" + module in served, f"{path.name} imports {module}, which is not served"


def test_page_requests_are_counted_by_path(http):
    before = metric(http.get("/metrics").text, "llmflow_requests_total", endpoint="/", status="200")
    http.get("/")
    after = metric(http.get("/metrics").text, "llmflow_requests_total", endpoint="/", status="200")
    assert after == before + 1


def test_the_openapi_document_leaves_the_page_out(http):
    paths = http.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not any(path.startswith("/playground") for path in paths)
