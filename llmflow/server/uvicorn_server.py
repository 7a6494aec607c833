"""Running an app on uvicorn: in the foreground (the CLI) or in a background thread (tests,
benchmarks, notebooks), bound to a socket opened first so that port 0 means a free port."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import uvicorn

from llmflow.server.connections import ConnectionLimits, GuardedHttpProtocol

#: after the grace period, how long ended streams get to write their last events
FINAL_EVENTS_S = 5.0


class GracefulServer(uvicorn.Server):
    """On SIGTERM/SIGINT uvicorn stops accepting and waits for open responses; this adds a grace
    period after which running generations are ended, so streams close with a finish chunk and
    [DONE] rather than being cut by uvicorn's task cancellation."""

    def __init__(self, config: uvicorn.Config, grace_s: float, end_generations: Any):
        super().__init__(config)
        self.grace_s = grace_s
        self._end_generations = end_generations

    async def shutdown(self, sockets: Any = None) -> None:
        timer = asyncio.get_running_loop().call_later(self.grace_s, self._end_generations)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()


def _server(app: Any, make: Callable[[uvicorn.Config], uvicorn.Server], **config: Any) -> uvicorn.Server:
    """`make(uvicorn.Config(app, **config))`; an llmflow app's with its connection limits (its
    keep-alive timeout, and the protocol that caps open connections and times request heads: see
    `connections`) and its open-connection gauge."""
    state = getattr(getattr(app, "state", None), "llmflow", None)
    if state is None:  # not an llmflow app: uvicorn's defaults
        return make(uvicorn.Config(app, **config))
    settings = state.settings
    limits = ConnectionLimits(
        settings.max_connections, settings.read_timeout_s, state.metrics.count_refused_connection
    )
    # uvicorn's `http` takes a protocol class: here one with `limits` bound
    config.update(
        http=partial(GuardedHttpProtocol, limits=limits), timeout_keep_alive=settings.keep_alive_timeout_s
    )
    server = make(uvicorn.Config(app, **config))
    state.metrics.watch_connections(lambda: len(server.server_state.connections))
    return server


def run(
    app: Any, host: str, port: int, *, log_level: str = "info", switch_interval_ms: float | None = None
) -> None:
    """Serve until SIGTERM or Ctrl-C, then shut down gracefully (see `GracefulServer`). The
    process is the server's alone here, so `switch_interval_ms` may set the interpreter's GIL
    switch interval (a background server leaves it alone)."""
    if switch_interval_ms is not None:
        sys.setswitchinterval(switch_interval_ms / 1000)
    state = app.state.llmflow
    grace_s = state.settings.shutdown_grace_s
    _server(
        app,
        lambda config: GracefulServer(config, grace_s, state.end_generations),
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=grace_s + FINAL_EVENTS_S,
    ).run()


class BackgroundServer:
    """An app served from a daemon thread; `with BackgroundServer(app) as server: server.url`."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, log_level: str = "warning"):
        self.app = app
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto must say TCP: asyncio turns Nagle off (TCP_NODELAY) only on sockets that do, and with
        # Nagle on, a response sent in two writes waits for the client's delayed ACK (~40 ms).
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port: int = self._socket.getsockname()[1]
        self._server = _server(
            app, uvicorn.Server, log_level=log_level, timeout_graceful_shutdown=1, lifespan="on"
        )
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name=f"llmflow-serve-{self.port}",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
