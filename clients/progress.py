"""A progress line on stderr: redrawn in place on a terminal, a log line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# No rate before this many seconds and lines, no estimate of the time left before this share
# of the lines too: a 7 s job once showed "eta 460s" in its first second.
SETTLE_SECONDS = 2.0
SETTLE_LINES = 10
ETA_FRACTION = 0.05


class Progress:
    def __init__(self, total: int, unit: str = "lines", rate_unit: str = "lines/s", stream: TextIO | None = None,
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

    def line(self, now: float | None = None, final: bool = False) -> str:
        """``done/total unit (pct%)``, the rate once it means something, elapsed seconds, and an
        estimate of the time left once enough is done to make one (the first requests of a run
        are all in flight at once, so early rates say little)."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        settled = elapsed >= SETTLE_SECONDS and self.done >= SETTLE_LINES
        rate = f", {self.counted / elapsed:.1f} {self.rate_unit}" if self.counted and (settled or final) else ""
        left = self.total - self.done
        eta = ""
        if settled and left and not final and self.done >= ETA_FRACTION * self.total:
            eta = f", eta {left / (self.done / elapsed):.0f}s"
        return f"{self.done}/{self.total} {self.unit} ({pct:.0f}%){rate}, {elapsed:.0f}s{eta}"

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
        self.stream.write(("\r\x1b[K" if self.tty else "") + self.line(final=True) + "\n")
        self.stream.flush()
