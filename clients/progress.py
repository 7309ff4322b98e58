"""A progress line on stderr: redrawn in place on a terminal, a log line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, unit: str = "lines", rate_unit: str = "sent/s", stream: TextIO | None = None,
                 every: float = 5.0, enabled: bool = True) -> None:
        self.total = total
        self.unit = unit
        self.rate_unit = rate_unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = 0.2 if self.tty else every
        self.enabled = enabled
        self.done = 0
        self.counted = 0  # what the rate counts (sentences sent), may differ from ``done``
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done: int = 0, counted: int = 0) -> None:
        self.done += done
        self.counted += counted
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        rate = self.counted / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        left = self.total - self.done
        eta = f", eta {left / (self.done / elapsed):.0f}s" if self.done and left else ""
        return f"{self.done}/{self.total} {self.unit} ({pct:.0f}%), {rate:.1f} {self.rate_unit}, {elapsed:.0f}s{eta}"

    def _draw(self, now: float) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self.stream.write(("\r\x1b[K" if self.tty else "") + self.line() + "\n")
        self.stream.flush()
