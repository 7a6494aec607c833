from tests.server.conftest import metric
def test_dbg(http, server):
    t = http.get("/metrics").text
    print("BEFORE", [l for l in t.splitlines() if "requests_total{" in l])
    r = http.get("/")
    print("GOT", r.status_code, r.headers.get("content-type"), server.app.state.llmflow.known_paths if hasattr(server.app, "state") else None)
    t = http.get("/metrics").text
    print("AFTER", [l for l in t.splitlines() if "requests_total{" in l])
