"""`bertzoo serve` in a child process on a free loopback port, for tests that talk to it over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from helpers.loop import free_port


@dataclass
class Served:
    process: subprocess.Popen
    url: str
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def start(model: str | Path, *args: str, log: Path, timeout: float = 120.0) -> Served:
    """Start the server and wait for its 'serving ... on URL' line (it prints it once the port accepts)."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = open(log, "w", encoding="utf-8")  # noqa: SIM115 - the child writes to it for its whole life
    process = subprocess.Popen(
        [sys.executable, "-m", "bertzoo", "serve", str(model), "--port", str(port), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )
    served = Served(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while "serving " not in served.stderr():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the server did not start:\n{served.stderr()}")
        time.sleep(0.1)
    return served


@contextmanager
def serving(model: str | Path, *args: str, log: Path) -> Iterator[Served]:
    served = start(model, *args, log=log)
    try:
        yield served
    finally:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait(30)
