"""`bertzoo serve`: load a model, warm it up, and answer HTTP requests with uvicorn until SIGTERM or SIGINT.

On a signal the server stops accepting connections, `/ready` turns 503, the requests in flight finish (up to
`drain_seconds`), and the process exits 0.
"""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path
from typing import Any

from bertzoo.errors import ConfigError
from bertzoo.serve.app import ServeSettings, create_app
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
    app = create_app(runner, settings)
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

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.draining = True  # /ready answers 503 from now on; requests in flight still finish
            super().handle_exit(sig, frame)
            # uvicorn re-raises the signal once shut down (exit status -15); a completed drain is a clean exit, 0.
            getattr(self, "_captured_signals", []).clear()

    server = Server(config)
    server.run()
    return 0
