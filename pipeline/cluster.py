"""Dask for every step: an embedded local cluster or an existing one, and an ordered task runner
with a progress bar."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tqdm.auto import tqdm

from formats.memory import peak_rss_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterOptions:
    """How a step gets its Dask workers (the options every ``prep`` step shares)."""

    scheduler: str | None = None     # address of an existing cluster; None: embedded LocalCluster
    workers: int = 2                 # embedded cluster: worker processes (1 thread each)
    memory_limit: str = "auto"       # embedded cluster: per-worker memory limit
    progress: bool = True


@contextmanager
def dask_client(options: ClusterOptions, worker_names: tuple[str, ...] = ()):
    """A ``distributed.Client``: connected to ``options.scheduler`` or to a fresh local cluster of
    ``options.workers`` single-threaded processes (closed on exit). ``worker_names``: the
    embedded cluster gets one worker per name (simulated machines); an existing cluster must
    already have workers of those names."""
    from distributed import Client, LocalCluster

    # Dask configures its loggers on import; its INFO chatter shows only at -vv (DEBUG).
    quiet = logging.getLogger().level > logging.DEBUG
    logging.getLogger("distributed").setLevel(logging.WARNING if quiet else logging.DEBUG)
    if options.scheduler:
        log.info("connecting to Dask scheduler %s", options.scheduler)
        with Client(options.scheduler) as client:
            _require_workers(client, worker_names)
            yield client
        return
    if worker_names:
        with _named_cluster(worker_names, options.memory_limit) as cluster, \
                Client(cluster) as client:
            yield client
        return
    with LocalCluster(n_workers=options.workers, threads_per_worker=1, processes=True,
                      memory_limit=options.memory_limit, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        log.info("embedded Dask cluster: %d workers", options.workers)
        yield client


def _require_workers(client, names) -> None:
    have = {w.get("name") for w in client.scheduler_info()["workers"].values()}
    missing = [n for n in names if n not in have]
    if missing:
        from formats import FormatError
        raise FormatError(f"the cluster has no workers named {missing} (start them with "
                          f"'dask worker ADDR --name NAME'); it has {sorted(map(str, have))}",
                          field="--machines")


def _named_cluster(names, memory_limit):
    from distributed import Nanny, Scheduler, SpecCluster

    # Simulated machines on this host: loopback only, quiet like LocalCluster.
    workers = {n: {"cls": Nanny, "options": {"name": n, "nthreads": 1, "host": "127.0.0.1",
                                             "memory_limit": memory_limit,
                                             "silence_logs": logging.ERROR}} for n in names}
    return SpecCluster(workers=workers, silence_logs=logging.ERROR,
                       scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0",
                                                                "host": "127.0.0.1"}})


class TaskRunner:
    """Runs ``fn`` over items as Dask tasks, returns results in item order.

    On the first failed task the others are cancelled and its exception is raised here.
    """

    def __init__(self, client, progress: bool = True):
        self.client, self.progress = client, progress

    def __call__(self, fn: Callable, items: Sequence, desc: str | None = None,
                 workers: Sequence[str] | None = None) -> list:
        """``workers``: per item, the name of the worker that must run it (or None)."""
        from distributed import as_completed

        items = list(items)
        if not items:
            return []
        if workers is None:
            futures = self.client.map(fn, items, pure=False)
        else:
            futures = [self.client.submit(fn, item, pure=False, workers=[w],
                                          allow_other_workers=False) for item, w in
                       zip(items, workers)]
        with tqdm(total=len(items), desc=desc or getattr(fn, "__name__", "tasks"),
                  disable=not self.progress, unit="task", leave=False) as bar:
            for fut in as_completed(futures):
                if fut.status == "error":
                    self.client.cancel(futures)
                    fut.result()  # raises the task's exception
                bar.update()
        return self.client.gather(futures)

    def star(self, fn: Callable, arg_tuples: Iterable[tuple], desc: str | None = None) -> list:
        """Like ``__call__`` for functions of several arguments."""
        return self(_Star(fn), list(arg_tuples), desc or getattr(fn, "__name__", "tasks"))

    def peak_rss_per_worker(self) -> dict[str, int]:
        """Peak resident memory (bytes) of each worker process so far."""
        return self.client.run(peak_rss_bytes)


class _Star:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, args):
        return self.fn(*args)


def local_runner(fn: Callable, items: Sequence, desc: str | None = None) -> list:
    """The in-process stand-in for :class:`TaskRunner` (tests, tiny inputs)."""
    return [fn(item) for item in items]
