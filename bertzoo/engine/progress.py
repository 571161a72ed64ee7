"""What a person watching a run sees: the tqdm bar (loss, accuracy, learning rate), one line per log
event, and messages that do not tear the bar. The numbers themselves go to `metrics` files."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from tqdm.auto import tqdm


def say(message: str) -> None:
    """Print a line on stderr above the progress bar (callers decide which rank speaks)."""
    tqdm.write(message, file=sys.stderr)


def fmt_duration(seconds: float) -> str:
    """`3725.2` -> `1:02:05`."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def fmt_rate(x: float) -> str:
    """`12345` -> `12.3k`."""
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def log_line(step: int, max_steps: int, means: Mapping[str, float], lr: float, rate: float, elapsed: float) -> str:
    """`step 10/100 | loss 2.3026 | ... | lr 1.00e-04 | 12.3k tok/s | 0:00:42` (no gradient norm: too noisy)."""
    parts = [f"step {step}/{max_steps}"]
    parts += [f"{k} {v:.4f}" for k, v in means.items() if k != "grad_norm"]
    parts += [f"lr {lr:.2e}", f"{fmt_rate(rate)} tok/s", fmt_duration(elapsed)]
    return " | ".join(parts)


class TokenRate:
    """Tokens per second between two readings (the log interval)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Start a new interval now."""
        self._start = time.monotonic()
        self._tokens = 0

    def add(self, tokens: int) -> None:
        """Count tokens trained on in this interval."""
        self._tokens += tokens

    def read(self) -> float:
        """Tokens per second since the interval started; starts the next interval."""
        now = time.monotonic()
        rate = self._tokens / max(1e-9, now - self._start)
        self._start, self._tokens = now, 0
        return rate


class ProgressBar:
    """The training bar: one tick per optimizer step, with the step's loss, the latest logged accuracy
    and the learning rate as its postfix."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self._bar: Any = tqdm(
            total=total, initial=initial, desc="train", dynamic_ncols=True, disable=not enabled, file=sys.stderr
        )
        self._acc = ""

    def step_done(self, loss: float, lr: float) -> None:
        """Tick once; `loss` is on the host already (the step's finiteness check put it there)."""
        self._bar.set_postfix_str(f"loss {loss:.4f}{self._acc} lr {lr:.2e}", refresh=False)
        self._bar.update(1)

    def show_accuracy(self, means: Mapping[str, float]) -> None:
        """Keep the first accuracy-like mean of a log event on the bar until the next one."""
        acc = next((k for k in means if "acc" in k), None)
        self._acc = f" {acc} {means[acc]:.3f}" if acc else ""

    def close(self) -> None:
        """Remove the bar from the terminal's live area."""
        self._bar.close()
