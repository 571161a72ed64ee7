"""`bertzoo serve`: load a model, warm it up, and answer HTTP requests with uvicorn until SIGTERM or SIGINT.

On a signal the server stops accepting connections, `/ready` turns 503, the requests in flight finish (up to
`drain_seconds`), and the process exits 0.
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from bertzoo.errors import ConfigError
from bertzoo.serve.app import ServeSettings, create_app
from bertzoo.serve.main_thread import MainThreadExecutor
from bertzoo.serve.runners import load_runner, warm_up

__all__ = ["serve"]


def _check_port(host: str, port: int) -> None:
    """ConfigError now, before the model loads, when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"port {port} on {host} is in use; pick another with --port") from None
            raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}); check --host and --port") from None


def serve(
    model: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    settings: ServeSettings | None = None,
    device: str = "auto",
    int8: bool = False,
    max_length: int = 128,
    precision: str = "auto",
    drain_seconds: float = 30.0,
    log_level: str = "warning",
) -> int:
    """Serve `model` until a shutdown signal; returns the exit code (0)."""
    import uvicorn

    _check_port(host, port)
    runner = load_runner(model, device=device, int8=int8, max_length=max_length, precision=precision)
    warm_up(runner)
    executor = MainThreadExecutor()  # the model runs here, on the main thread; uvicorn's loop on its own thread
    app = create_app(runner, settings, executor)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=drain_seconds, access_log=False
    )
    endpoints = ", ".join(f"/{e}" for e in runner.endpoints)

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # bound and accepting: say where, for scripts waiting on this line
                where = f"http://{host}:{port}"
                print(
                    f"serving {runner.name} on {where} ({endpoints}; API at {where}/docs)", file=sys.stderr, flush=True
                )

    server = Server(config)

    def drain(sig: int, frame: Any) -> None:
        app.state.draining = True  # /ready answers 503 from now on; requests in flight still finish
        if server.should_exit and sig == signal.SIGINT:
            server.force_exit = True  # a second Ctrl-C: stop now
        server.should_exit = True  # uvicorn stops accepting, waits for requests in flight, then returns

    # Signals reach the main thread only; uvicorn, on its own thread, leaves them to us. A completed drain exits 0.
    previous = {sig: signal.signal(sig, drain) for sig in (signal.SIGTERM, signal.SIGINT)}
    loop_thread = threading.Thread(target=server.run, name="bertzoo-serve-http", daemon=True)
    try:
        loop_thread.start()
        executor.run_until(lambda: not loop_thread.is_alive())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1
