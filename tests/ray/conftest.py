"""A real local Ray cluster for the module, Ray Serve's proxy on a free 127.0.0.1 port, and the
embedded model deployed with one thread per replica."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from llmflow.ray.app import MODEL_NAME
from llmflow.ray.launch import APP_NAME
from llmflow.ray.replica import REPLICA_HEADER
from tests.server.conftest import TIMEOUT_S, metric

#: what one replica reserves and runs with: a 2-core machine holds two replicas and the proxy
THREADS = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_pair() -> int:
    """A free port whose successor is free too (a base port for two replicas' metrics)."""
    while True:
        base = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base


@pytest.fixture(scope="package")
def ray_serve() -> Iterator[str]:
    """Ray (4 logical CPUs: two replicas and headroom) and Serve's HTTP proxy; its base URL."""
    import ray
    from ray import serve

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="package")
def deploy(ray_serve) -> Callable[..., str]:
    """`deploy(replicas=2, ...)`: (re)deploy the embedded model with `llmflow.ray.build`'s args;
    returns the proxy's URL once every replica is up."""
    from ray import serve

    from llmflow.ray import build

    def run(**args: Any) -> str:
        serve.run(build({"threads": THREADS, **args}), name=APP_NAME, route_prefix="/")
        # serve.run returns once the new replicas run; the old ones may still be draining, and
        # a request routed to one of them would see the old settings
        replicas = args.get("replicas") or args.get("scaling", {}).get("min_replicas") or 1
        wait_for(lambda: _states() == {"RUNNING": replicas}, "the old replicas to stop")
        return ray_serve

    return run


def replica_count(status: str = "RUNNING") -> int:
    """Replicas of the model deployment in `status`, as Ray Serve reports them."""
    return _states().get(status, 0)


def _states() -> dict[str, int]:
    from ray import serve

    deployment = serve.status().applications[APP_NAME].deployments[MODEL_NAME]
    return {state: count for state, count in deployment.replica_states.items() if count}


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def metrics_by_replica(http: httpx.Client, replicas: int, timeout_s: float = 60) -> dict[str, str]:
    """Each replica's own /metrics text, by replica id: Ray routes each GET to either replica (a
    new one once the ingress's router has heard of it), so ask until all have answered."""
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < replicas:
        assert time.monotonic() < deadline, f"only {sorted(seen)} of {replicas} replicas answered /metrics"
        response = http.get("/metrics")
        seen[response.headers[REPLICA_HEADER]] = response.text
        time.sleep(0.01)
    return seen


def served_requests(metrics_text: str, endpoint: str) -> float:
    return metric(metrics_text, "llmflow_requests_total", endpoint=endpoint, status="200")
