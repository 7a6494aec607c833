"""A model replica: llmflow's own app (the same routes, limits and metrics as `llmflow serve`),
loaded once per Ray Serve replica and driven by the ingress through `bridge.run_asgi`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Message

from llmflow.ray.bridge import run_asgi
from llmflow.server.model_config import ModelConfig
from llmflow.server.settings import ServerSettings

#: the response header that names the replica which answered (load spread, per-replica metrics)
REPLICA_HEADER = "x-llmflow-replica"


class ModelReplica:
    """One replica of the model deployment. Its app's lifespan (the idle-unload reaper, the
    shutdown that ends running streams) runs as under uvicorn: started here, ended in `__del__`."""

    async def __init__(
        self, models: list[ModelConfig], settings: ServerSettings, metrics_port: int | None = None
    ) -> None:
        from ray import serve

        from llmflow.server import create_app

        self._app = create_app(models, settings)
        context = serve.get_replica_context()
        self._replica_id = context.replica_id.unique_id
        if metrics_port is not None:
            _export_metrics(self._app, settings.host, metrics_port + context.rank.local_rank)
        self._headers = [(REPLICA_HEADER.encode(), self._replica_id.encode())]
        self._lifespan = contextlib.AsyncExitStack()
        await self._lifespan.enter_async_context(self._app.router.lifespan_context(self._app))

    async def handle(self, scope: dict[str, Any], body: bytes) -> AsyncIterator[list[Message]]:
        """One HTTP request through the app, its ASGI messages streamed back in batches."""
        async for batch in run_asgi(self._app, scope, body, self._headers):
            yield batch

    def replica_id(self) -> str:
        return self._replica_id

    async def __del__(self) -> None:
        await self._lifespan.aclose()


def _export_metrics(app: Any, host: str, port: int) -> None:
    """The replica's own /metrics on a port of its node (`metrics_port` + its rank on the node),
    for Prometheus to scrape each replica: through Ray's proxy a scrape reaches one replica."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=host, registry=app.state.llmflow.metrics.registry)
