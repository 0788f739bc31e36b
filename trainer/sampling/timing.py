"""Per-epoch time breakdown and work counts: named totals, added from any thread, taken once per
epoch."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

# the breakdown's parts, in log order
PHASES = ("sample_local", "sample_remote", "feature_fetch", "wait_batch", "forward_backward",
          "allreduce", "eval")

# what training batches did, counted (summed over ranks in the epoch's record): the seeds and
# the edges the sampler returned, and of the input rows that live on other parts (halo rows),
# how many were served here without a request (halo_cache_hits: by the halo cache or the
# remote store), and of those how many by the remote store (--remote-store)
COUNTS = ("seeds_sampled", "sampled_edges", "halo_rows", "halo_cache_hits", "halo_store_hits")


class Breakdown:
    """Seconds spent per phase. Background phases (sampling, fetch) overlap the training
    loop's, so the parts may sum to more than the epoch's wall time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, phase: str, seconds: float) -> None:
        with self._lock:
            self._totals[phase] = self._totals.get(phase, 0.0) + seconds

    def count(self, name: str, n: int) -> None:
        """Add ``n`` to the work count ``name`` (one of :data:`COUNTS`)."""
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

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

    def take_counts(self) -> dict[str, int]:
        """Work counts since the last call (every one of :data:`COUNTS`, zero if unused),
        reset."""
        with self._lock:
            out = {c: self._counts.get(c, 0) for c in COUNTS}
            self._counts.clear()
        return out
