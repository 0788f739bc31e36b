"""Fresh workers between passes: a worker whose process holds more anonymous memory than a limit
is restarted before the next pass starts.

What a long step's worker carries from task to task is mostly freed heap that glibc keeps
resident in holes too small for the next large array (at 10^9 edges the multilevel partitioner's
workers held 311-373 MB between tasks, of which 29 MB was in use). Trimming returns the pages
but not the layout: the next task re-touches the holes, and its peak stayed (RESULTS.md). A new
process starts with a compact heap. Between two passes of a step nothing lives in a worker (the
passes talk through files and the results the client fetched), so a restart loses no work; it
costs about a second (the nanny starts a new process, which re-imports its modules).

Workers are restarted only through their nanny, and by default only on the embedded cluster
this process started: a cluster given by address may serve other clients, whose tasks a
restart would kill.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from distributed.diagnostics.plugin import WorkerPlugin

from graphprep.pipeline.core.memory import anon_bytes

log = logging.getLogger(__name__)

RECYCLE_MB_KEY = "graphprep.recycle-mb"    # dask.config key: MB, 0 = never, "auto"
# Held anonymous memory above which a worker is restarted between passes, on the embedded
# cluster. A fresh worker holds ~60 MB and ~135 MB once a task has imported pyarrow and numpy
# and filled their pools; 256 MB leaves room for a pass's own growth.
AUTO_RECYCLE_MB = 256


def recycle_limit_bytes(client) -> int | None:
    """The limit (bytes) a runner on ``client`` recycles its workers above, or None for never:
    the ``graphprep.recycle-mb`` setting, where "auto" (the default) means
    ``AUTO_RECYCLE_MB`` on the embedded cluster (a client made from a cluster object of this
    process) and never on a cluster given by address."""
    import dask

    value = dask.config.get(RECYCLE_MB_KEY, "auto")
    if value in (None, "auto"):
        return AUTO_RECYCLE_MB << 20 if getattr(client, "cluster", None) is not None else None
    mb = int(value)
    return mb << 20 if mb > 0 else None


class WorkerSetup(WorkerPlugin):
    """Runs ``fn()`` in every worker process: those running now, those that join later and
    those a restart replaces (a process setting such as the mmap threshold dies with its
    process)."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn

    def setup(self, worker) -> None:
        self.fn()


@contextmanager
def on_every_worker(runner, fn: Callable[[], object]) -> Iterator[None]:
    """While the block runs, ``fn()`` runs on every worker of ``runner``'s cluster: now and in
    every worker process that starts (or restarts) before the block ends (in-process runners:
    nowhere). A process keeps what ``fn`` set; only its successors start without it, so a
    step's setting does not follow a shared cluster into the next step's restarted workers."""
    client = getattr(runner, "client", None)
    if client is None:
        yield
        return
    name = f"graphprep-{fn.__name__}"
    client.register_plugin(WorkerSetup(fn), name=name)
    try:
        yield
    finally:
        client.unregister_worker_plugin(name)


# Restart times per cluster (scheduler address) and worker name, for the whole process: the
# steps sharing one cluster (a benchmark, the Python API) each have their own Recycler, and
# the cluster's lost-worker check of one step's restart can fall within the next step's.
_RESTARTED: dict[str, dict[str, list[float]]] = {}


class Recycler:
    """Restarts, between passes, the workers holding more than ``limit`` bytes of anonymous
    memory. A cluster whose workers cannot be restarted (no nanny) turns it off, logged once.

    A worker is absent for about a second while it restarts, and a ``SpecCluster`` (a
    ``LocalCluster``) closes the nanny of a worker that is absent exactly
    ``distributed.deploy.lost-worker-timeout`` after it left (15 s by default): a worker
    restarted again at that moment would be gone for good. ``cluster.local_cluster``'s
    clusters close none, but one given by address or by the caller may: such a worker keeps
    its memory until the next pass instead, whichever step of this process restarted it
    before. ``timeout``: how long a restart may take (Dask's own wait for the workers to come
    back), at least ``MIN_RESTART_S``."""

    RESTART_WINDOW_S = 5.0     # a restart's absence, with room to spare on a loaded machine
    MIN_RESTART_S = 30.0       # a restart takes seconds on a loaded machine: never bound below

    def __init__(self, client, limit: int, timeout: float = 120.0):
        self.client, self.limit = client, limit
        self.timeout = max(float(timeout), self.MIN_RESTART_S)
        self.restarts = 0
        self.restarting: list[str] = []                  # "name (address)" of the last restart
        address = str(getattr(getattr(client, "scheduler", None), "address", id(client)))
        self._left_at = _RESTARTED.setdefault(address, {})   # worker name -> restart times

    def __call__(self) -> None:
        held = self.client.run(anon_bytes, on_error="ignore")
        # The scheduler's workers asked afresh, as cluster.workers_info (this module is below
        # cluster.py, whose TaskRunner runs a Recycler): not the client's cached identity.
        workers = self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"]
        names = {addr: str(w.get("name")) for addr, w in workers.items()}
        heavy = [w for w, b in held.items() if isinstance(b, int) and b > self.limit and
                 w in names and not self._checked_while_away(names[w])]
        if not heavy:
            return
        log.debug("restarting %d worker(s) holding %s MB (limit %d MB)", len(heavy),
                  [held[w] >> 20 for w in heavy], self.limit >> 20)
        now = time.monotonic()
        self.restarting = [f"{names[w]} ({w})" for w in heavy]
        for w in heavy:
            self._left_at.setdefault(names[w], []).append(now)
        try:
            self.client.restart_workers(workers=heavy, timeout=self.timeout)
        except Exception as err:  # noqa: BLE001 - no nanny, or one that failed: keep going
            log.warning("cannot restart workers to free their memory (%s); they keep it",
                        err)
            self.limit = None
            return
        self.restarts += len(heavy)

    def describe_restarting(self) -> str:
        """The workers of the last restart, as ``name (address)``, comma-separated."""
        return ", ".join(self.restarting)

    def _checked_while_away(self, name: str) -> bool:
        """Whether the cluster's lost-worker check of an earlier restart of ``name`` would
        fall within a restart starting now."""
        import dask
        from dask.utils import parse_timedelta

        delay = parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout"))
        now = time.monotonic()
        return any(-self.RESTART_WINDOW_S <= t + delay - now <= 2 * self.RESTART_WINDOW_S
                   for t in self._left_at.get(name, ()))

    @property
    def active(self) -> bool:
        return self.limit is not None
