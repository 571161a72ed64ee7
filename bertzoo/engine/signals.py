"""Stopping on Ctrl-C / SIGTERM without losing work: the first signal asks the loop to finish its
step and save a checkpoint, a second one aborts at once. DataLoader workers ignore both, so only the
main process decides."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def ignore_stop_signals(worker_id: int) -> None:
    """DataLoader worker init: leave SIGINT/SIGTERM to the main process.

    Ctrl-C reaches the whole process group; a worker dying of it would crash the loop before it can
    finish the step and checkpoint. Workers still exit with the main process (DataLoader watchdog).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def stop_on_signals(request_stop: Callable[[str], None], stopping: Callable[[], bool]) -> Iterator[None]:
    """While active, SIGINT/SIGTERM call `request_stop(name)`; one arriving when `stopping()` is
    already true raises KeyboardInterrupt (the user insists: abort without a checkpoint).

    The previous handlers come back on exit. Outside the main thread nothing is installed: Python
    only lets the main thread set signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if stopping():
            raise KeyboardInterrupt(f"second {name}: stopping without a checkpoint")
        request_stop(name)

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
