"""Per-epoch time breakdown: named totals, added from any thread, taken once per epoch."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

# the breakdown's parts, in log order
PHASES = ("sample_local", "sample_remote", "feature_fetch", "wait_batch", "forward_backward",
          "allreduce", "eval")


class Breakdown:
    """Seconds spent per phase. Background phases (sampling, fetch) overlap the training
    loop's, so the parts may sum to more than the epoch's wall time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        with self._lock:
            self._totals[phase] = self._totals.get(phase, 0.0) + seconds

    @contextmanager
    def clock(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - start)

    def take(self) -> dict[str, float]:
        """Totals since the last call (every phase, zero if unused), reset."""
        with self._lock:
            out = {p: self._totals.get(p, 0.0) for p in PHASES}
            self._totals.clear()
        return out
