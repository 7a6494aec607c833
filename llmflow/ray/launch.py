"""`llmflow serve --ray`: start (or join) a Ray cluster, run the application, wait, clean up."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from llmflow.errors import EngineUnavailable
from llmflow.ray.scaling import Scaling
from llmflow.server.model_config import ModelConfig
from llmflow.server.settings import ServerSettings

logger = logging.getLogger(__name__)

#: the application's name in Ray Serve (`serve status`)
APP_NAME = "llmflow"


def require_ray() -> None:
    """Ray Serve is optional: say how to get it instead of an ImportError."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        raise EngineUnavailable(
            "--ray needs Ray Serve, which is not installed: pip install 'llmflow[ray]'"
        ) from None


def serve_on_ray(
    models: list[ModelConfig],
    settings: ServerSettings,
    scaling: Scaling,
    address: str | None,
    announce: Callable[[str], None],
    metrics_port: int | None = None,
) -> None:
    """Serve `models` on Ray Serve at the settings' host and port until interrupted. Joins the
    cluster at `address` (or the one `ray start` left on this machine); else starts a local one,
    which it stops again on the way out. On a joined cluster only this application is removed."""
    require_ray()
    import ray
    from ray import serve

    from llmflow.ray.app import application

    app = application(models, settings, scaling, metrics_port)
    joined = _connect(ray, address)
    # after ray.init, which sets a SIGTERM handler that skips cleanup; SIGINT too, since a process
    # started in a shell script's background inherits it ignored (uvicorn does the same for
    # `llmflow serve` without Ray)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop)
    try:
        serve.start(
            http_options={
                "host": settings.host,
                "port": settings.port,
                "keep_alive_timeout_s": settings.keep_alive_timeout_s,
            }
        )
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
        where = f"http://{settings.host}:{settings.port}"
        announce(f"serving on Ray Serve at {where} (OpenAI base URL {where}/v1); Ctrl-C stops it")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        announce("stopping")
    finally:
        with contextlib.suppress(Exception):  # not deployed yet, or the cluster is gone
            serve.delete(APP_NAME)
        if not joined:
            serve.shutdown()
            ray.shutdown()


def _stop(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM stop the server as Ctrl-C does at a terminal."""
    raise KeyboardInterrupt


def _connect(ray: Any, address: str | None) -> bool:
    """Connect to the cluster at `address`, or to a running one; else start a local cluster.
    True when it joined a cluster that was already there."""
    if address is not None:
        ray.init(address=address)
        return True
    try:
        ray.init(address="auto")
        return True
    except ConnectionError:
        logger.info("no Ray cluster is running here: starting a local one")
        ray.init(include_dashboard=False)
        return False
