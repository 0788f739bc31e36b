"""Dask for every step: an embedded local cluster or an existing one, and an ordered task runner
with a progress bar."""

from __future__ import annotations

import ctypes
import logging
import os
import time
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tqdm.auto import tqdm

from formats.memory import peak_rss_bytes

log = logging.getLogger(__name__)

LOST_WORKER_TIMEOUT_KEY = "graphprep.lost-worker-timeout"   # dask.config key, seconds
LOST_WORKER_TIMEOUT_S = 120.0
RECYCLE_MB_KEY = "graphprep.recycle-mb"    # dask.config key: MB, 0 = never, "auto"
# Held anonymous memory above which a worker is restarted between passes (recycle.py), on the
# embedded cluster. A fresh worker holds ~60 MB and ~135 MB once a task has imported pyarrow
# and numpy and filled their pools; 256 MB leaves room for a pass's own growth.
AUTO_RECYCLE_MB = 256


@dataclass(frozen=True)
class ClusterOptions:
    """How a step gets its Dask workers (the options every ``prep`` step shares)."""

    scheduler: str | None = None     # address of an existing cluster; None: embedded LocalCluster
    workers: int = 2                 # embedded cluster: worker processes (1 thread each)
    memory_limit: str = "auto"       # embedded cluster: per-worker memory limit
    progress: bool = True
    client: object = None            # a distributed.Client to use as is (the Python API)
    security: object = None          # distributed.Security for a tls:// scheduler (tls_security)


def tls_security(scheduler: str | None, ca_file: str | None, cert: str | None,
                 key: str | None):
    """A ``distributed.Security`` requiring TLS with these PEM files (``key``: None when
    ``cert`` holds the key too), or None when none is given: Dask's own configuration
    (``distributed.comm.tls.*``) then applies. Raises ``FormatError`` naming the option for a
    missing file, a partial set, or a ``tls://`` scheduler with no certificates anywhere."""
    import dask
    from formats import FormatError

    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    for option, path in given.items():
        if path is not None and not os.path.isfile(path):
            raise FormatError(f"{path}: no such file", field=option)
    if ca_file is None and cert is None and key is None:
        tls = scheduler is not None and scheduler.startswith("tls://")
        if tls and not dask.config.get("distributed.comm.tls.ca-file", None):
            raise FormatError(f"{scheduler} needs certificates: pass --tls-ca-file and "
                              "--tls-cert (and --tls-key), or set distributed.comm.tls.* in "
                              "Dask's configuration", field="--scheduler")
        return None
    if ca_file is None or cert is None:
        raise FormatError("TLS needs both --tls-ca-file (the CA that signed the scheduler's "
                          "certificate) and --tls-cert (this client's)", field="--tls-cert")
    if scheduler is None or not scheduler.startswith("tls://"):
        raise FormatError(f"TLS certificates given, but --scheduler {scheduler} is not a "
                          "tls:// address", field="--scheduler")
    from distributed.security import Security
    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key,
                    require_encryption=True)


@contextmanager
def dask_client(options: ClusterOptions, worker_names: tuple[str, ...] = ()):
    """A ``distributed.Client``: connected to ``options.scheduler`` or to a fresh local cluster of
    ``options.workers`` single-threaded processes (closed on exit). ``worker_names``: the
    embedded cluster gets one worker per name (simulated machines); an existing cluster must
    already have workers of those names."""
    from distributed import Client

    # Dask configures its loggers on import; its INFO chatter shows only at -vv (DEBUG).
    quiet = logging.getLogger().level > logging.DEBUG
    logging.getLogger("distributed").setLevel(logging.WARNING if quiet else logging.DEBUG)
    worker_logs = QUIET_WORKER_LOGS if quiet else logging.ERROR
    if options.client is not None:            # the caller's: neither started nor closed here
        _require_workers(options.client, worker_names)
        yield options.client
        return
    if options.scheduler:
        log.info("connecting to Dask scheduler %s", options.scheduler)
        with Client(options.scheduler, security=options.security) as client:
            _log_dashboard(client)
            _require_workers(client, worker_names)
            yield client
        return
    if worker_names:
        with _named_cluster(worker_names, options.memory_limit, worker_logs) as cluster, \
                Client(cluster) as client:
            _log_dashboard(client)
            yield client
        return
    with local_cluster(options.workers, options.memory_limit, worker_logs) as cluster, \
            Client(cluster) as client:
        log.info("embedded Dask cluster: %d workers", options.workers)
        _log_dashboard(client)
        yield client


# Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536 so that freed memory goes back
# to the OS at once. Setting it also turns off glibc's adaptive mmap threshold: every array over
# 128 KiB becomes a fresh mmap whose pages the kernel zeroes on first touch. Our tasks allocate
# and free arrays of a chunk's size over and over: at 10^7 edges the multilevel partitioner
# spent 27 s of its 73 s of CPU in the kernel with it, 9.6 s without (wall 42 s -> 31 s). Workers
# of an embedded cluster run without it; see the README for workers you start yourself.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}

# The adaptive threshold has its own cost: once a 32 MB array is freed, every array up to 32 MB
# goes on the heap, whose freed holes stay resident. At 10^9 edges a multilevel worker held
# 428 MB of free heap after one task. A fixed 8 MB threshold keeps chunk-sized temporaries on
# the heap and returns larger ones to the OS at free. Only the multilevel partitioner asks for
# it (fix_mmap_threshold): on the planted 10^9 graph its worker peak went 641.5 -> 544.5 MB in
# no more time, while synth (+34%) and verify (+42%), which fill chunk-sized arrays over and
# over, slowed down under it.
MMAP_THRESHOLD = 8 << 20
_M_MMAP_THRESHOLD = -3                    # glibc's mallopt parameter


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Set glibc's mmap threshold of this process to ``nbytes`` (which also turns its adaptive
    threshold off for the life of the process). Returns whether it was set: False where the C
    library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(nbytes)) == 1
    except (OSError, AttributeError):
        return False


# Under load a worker's last heartbeat can race the scheduler's close; Dask then logs a
# CommClosedError traceback at ERROR after a run that succeeded (dask/distributed#7105, #9032).
# Every failure that matters reaches the client as its task's exception, so embedded clusters
# show workers' logs only at CRITICAL, or at ERROR with -vv.
QUIET_WORKER_LOGS = logging.CRITICAL


def local_cluster(workers: int, memory_limit: str | int = "auto",
                  worker_logs: int = QUIET_WORKER_LOGS, **kwargs):
    """A ``LocalCluster`` of ``workers`` single-threaded processes on this host (a context
    manager), with the worker environment above; Dask logs below ``worker_logs`` are dropped."""
    import dask
    from distributed import LocalCluster

    with dask.config.set(WORKER_ENVIRON):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                            memory_limit=memory_limit, dashboard_address="127.0.0.1:0",
                            silence_logs=worker_logs, **kwargs)


def _log_dashboard(client) -> None:
    services = client.scheduler_info(n_workers=0).get("services", {})
    link = client.dashboard_link if "dashboard" in services else None
    log.info("Dask dashboard: %s", link or "none (the scheduler serves no dashboard)")


def _require_workers(client, names) -> None:
    have = {w.get("name") for w in workers_info(client).values()}
    missing = [n for n in names if n not in have]
    if missing:
        from formats import FormatError
        raise FormatError(f"the cluster has no workers named {missing} (start them with "
                          f"'dask worker ADDR --name NAME'); it has {sorted(map(str, have))}",
                          field="--machines")


def _named_cluster(names, memory_limit, worker_logs: int = QUIET_WORKER_LOGS):
    from distributed import Nanny, Scheduler, SpecCluster

    # Simulated machines on this host: loopback only, quiet like LocalCluster.
    workers = {n: {"cls": Nanny, "options": {"name": n, "nthreads": 1, "host": "127.0.0.1",
                                             "memory_limit": memory_limit,
                                             "silence_logs": worker_logs}} for n in names}
    import dask

    with dask.config.set(WORKER_ENVIRON):
        scheduler = {"cls": Scheduler, "options": {"dashboard_address": "127.0.0.1:0",
                                                   "host": "127.0.0.1"}}
        return SpecCluster(workers=workers, silence_logs=worker_logs, scheduler=scheduler)


class LostWorkerError(RuntimeError):
    """A worker that tasks need left the cluster and did not come back in time."""


def workers_info(client) -> dict[str, dict]:
    """The scheduler's current workers, address -> info, asked afresh. Not through
    ``client.scheduler_info()``: it returns the client's cached identity, which the client's
    own periodic refresh (without workers) can overwrite between the fetch and the return;
    under load that showed as every worker 'leaving' and 'coming back' at once."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _workers_by_name(client) -> dict[str, str]:
    """Current workers: name -> address."""
    return {str(w.get("name")): addr for addr, w in workers_info(client).items()}


class TaskRunner:
    """Runs ``fn`` over items as Dask tasks, returns results in item order.

    On the first failed task the others are cancelled and its exception is raised here.
    A lost worker never hangs a step: Dask reruns its unpinned tasks elsewhere; a task pinned to
    a named worker (a machine) is resubmitted when a worker of that name comes back (Dask binds
    a name to an address at submit time, so the pinned task would wait forever), and when none
    does within ``lost_worker_timeout`` seconds the step fails naming the worker.

    Before each call, workers holding more anonymous memory than ``--recycle-mb`` are
    restarted (``recycle.Recycler``; by default on the embedded cluster only).
    """

    POLL_S = 1.0
    SETTLE_S = 0.5      # after a cancel: how long no cancelled task may run before returning

    def __init__(self, client, progress: bool = True, lost_worker_timeout: float | None = None):
        import dask

        from .recycle import Recycler, recycle_limit_bytes

        self.client, self.progress = client, progress
        limit = recycle_limit_bytes(client)
        self.recycler = Recycler(client, limit) if limit is not None else None
        self.lost_worker_timeout = lost_worker_timeout if lost_worker_timeout is not None else \
            float(dask.config.get(LOST_WORKER_TIMEOUT_KEY, LOST_WORKER_TIMEOUT_S))

    def __call__(self, fn: Callable, items: Sequence, desc: str | None = None,
                 workers: Sequence[str] | None = None) -> list:
        """``workers``: per item, the name of the worker that must run it (or None)."""
        from distributed import wait

        items = list(items)
        if not items:
            return []
        if self.recycler is not None and self.recycler.active:
            self.recycler()     # between passes: no task of this runner is running
        desc = desc or getattr(fn, "__name__", "tasks")
        pins = list(workers) if workers is not None else [None] * len(items)
        futures = [self._submit(fn, item, pin) for item, pin in zip(items, pins)]
        watch = _WorkerWatch(self.client, desc, self.lost_worker_timeout)
        results = [None] * len(items)
        with tqdm(total=len(items), desc=desc, disable=not self.progress, unit="task",
                  leave=False) as bar:
            pending = set(range(len(items)))
            while pending:
                try:
                    wait([futures[i] for i in pending], timeout=self.POLL_S,
                         return_when="FIRST_COMPLETED")
                except TimeoutError:
                    pass
                except CancelledError:
                    pass  # a future cancelled elsewhere: settled below, after any failure
                done = sorted(i for i in pending if futures[i].done())
                failed = [i for i in done if futures[i].status == "error"] or \
                    [i for i in done if futures[i].status == "cancelled"]
                if failed:
                    k = failed[0]
                    self._cancel_and_settle([futures[j] for j in pending if j != k],
                                            f"task {k} of {desc!r} failed")
                    self._raise_failure(futures[k], items[k], desc)
                for i in done:
                    # Fetched at once: a result left on a worker that dies is lost with it.
                    results[i] = futures[i].result()
                    futures[i].release()
                    if isinstance(results[i], _Failed):
                        self._cancel_and_settle([futures[j] for j in pending if j != i],
                                                f"task {i} of {desc!r} failed")
                        raise results[i].error
                    pending.discard(i)
                    bar.update()
                for i in watch.check({i: pins[i] for i in pending if pins[i] is not None}):
                    futures[i].cancel()
                    futures[i] = self._submit(fn, items[i], pins[i])
        return results

    @staticmethod
    def _raise_failure(future, item, desc: str):
        """Raise the exception of a failed task, with the task, its file and the line that
        raised it added to the message (the user sees one line). A task cancelled by someone
        else (the scheduler, another client) raises :class:`TaskCancelled` saying so."""
        from formats import FormatError

        if future.status == "cancelled":
            raise TaskCancelled(f"a task of {desc!r}{_item_file(item)} was cancelled by the "
                                f"Dask cluster, not by this step ({future.key})")
        try:
            future.result()
        except (FormatError, OSError):
            raise  # already names its file
        except Exception as err:  # noqa: BLE001 - re-raised as itself, with its context
            _add_context(err, desc, item)
            raise
        raise TaskCancelled(f"a task of {desc!r} failed without an exception ({future.key})")

    def _cancel_and_settle(self, futures: list, why: str = "", timeout: float = 60.0) -> None:
        """Cancel ``futures`` and wait (bounded) until none still runs on a worker: a cancelled
        task that already started runs to its end, and the caller is about to remove the
        folder it writes into. ``why`` is the reason Dask records for the cancellation."""
        keys = {f.key for f in futures}
        try:
            self.client.cancel(futures, reason=why or None)
        except TypeError:   # distributed before 2024.2 takes no reason
            self.client.cancel(futures)
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            # Asked of the workers: the scheduler forgets a cancelled key at once, while the
            # worker's thread runs it to its end (state 'cancelled', still executing). Quiet
            # for SETTLE_S, not once: a task the scheduler sent before the cancel may reach
            # its worker, and start, after a poll found nothing running.
            per_worker = self.client.run(_running_keys, on_error="ignore")
            now = time.monotonic()
            if keys & {k for ks in per_worker.values() for k in ks}:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= self.SETTLE_S:
                return
            time.sleep(0.05)
        log.warning("cancelled tasks still running after %g s", timeout)

    def _submit(self, fn, item, pin: str | None):
        task = _ExpectedFailures(fn)
        if pin is None:
            return self.client.submit(task, item, pure=False)
        return self.client.submit(task, item, pure=False, workers=[pin],
                                  allow_other_workers=False)

    def star(self, fn: Callable, arg_tuples: Iterable[tuple], desc: str | None = None) -> list:
        """Like ``__call__`` for functions of several arguments."""
        return self(_Star(fn), list(arg_tuples), desc or getattr(fn, "__name__", "tasks"))

    def peak_rss_per_worker(self) -> dict[str, int]:
        """Peak resident memory (bytes) of each worker process so far."""
        return self.client.run(peak_rss_bytes)


def _running_keys(dask_worker) -> list:
    """On a worker: the keys of the tasks occupying one of its threads, cancelled ones
    included (they run to their end)."""
    return [ts.key for ts in dask_worker.state.all_running_tasks]


class _WorkerWatch:
    """Notices workers leaving and coming back while a set of tasks runs (polled)."""

    def __init__(self, client, desc: str, timeout: float):
        self.client, self.desc, self.timeout = client, desc, timeout
        self.start = _workers_by_name(client)
        self.seen = dict(self.start)
        self.gone_since: dict[str, float] = {}

    def check(self, pinned: dict[int, str]) -> list[int]:
        """Pending tasks (index -> worker name) whose worker came back at a new address."""
        now = _workers_by_name(self.client)
        for name, addr in self.seen.items():
            if name not in now and name not in self.gone_since:
                log.warning("Dask worker %s (%s) left the cluster during %r", name, addr,
                            self.desc)
                self.gone_since[name] = time.monotonic()
        moved = {n for n, a in now.items() if n in self.seen and self.seen[n] != a}
        for name in moved | {n for n in self.gone_since if n in now}:
            log.warning("Dask worker %s is back at %s", name, now[name])
            self.gone_since.pop(name, None)
        self.seen.update(now)
        self._fail_if_lost(now, set(pinned.values()))
        return [i for i, name in pinned.items() if name in moved]

    def _fail_if_lost(self, now: dict[str, str], needed: set[str]) -> None:
        for name, since in self.gone_since.items():
            waited = time.monotonic() - since
            if waited > self.timeout and (name in needed or not now):
                raise LostWorkerError(
                    f"Dask worker {name} ({self.start.get(name, '?')}) left the cluster during "
                    f"{self.desc!r} and did not come back within {self.timeout:g} s"
                    + (" (no worker is left)" if not now else
                       "; its tasks cannot run elsewhere: restart it, then rerun the command "
                       "to resume"))


class TaskCancelled(RuntimeError):
    """A task of a step was cancelled by the cluster (not by the step), so it has no result."""


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _item_file(item) -> str:
    """`` on PATH`` for a task item that names the file it reads (``.path``), else ``""``."""
    for x in (item, *(item if isinstance(item, tuple) else ())):
        path = getattr(x, "path", None)
        if isinstance(path, str):
            return f" on {path}"
    return ""


def _raised_at(tb) -> str | None:
    """``file:line`` of the innermost frame of ``tb`` in graphprep's own code (relative to the
    project; this module's task wrapper excepted), else of the innermost frame; None without a
    traceback. A failed task's traceback is the worker's, carried to the client by Dask."""
    last = mine = None
    while tb is not None:
        code = tb.tb_frame.f_code.co_filename
        last = (code, tb.tb_lineno)
        if os.path.isabs(code) and code.startswith(_ROOT + os.sep) and \
                "site-packages" not in code and code != os.path.abspath(__file__):
            mine = (os.path.relpath(code, _ROOT), tb.tb_lineno)
        tb = tb.tb_next
    where = mine or (last and (os.path.basename(last[0]), last[1]))
    return f"{where[0]}:{where[1]}" if where else None


def _add_context(err: BaseException, desc: str, item) -> None:
    """Append ``(task DESC on FILE, raised at FILE:LINE)`` to ``err``'s one-string message in
    place (its type stays, so handlers and the CLI's one line see the real error); exceptions
    whose text is not their one argument get it as a note (shown with the traceback)."""
    where = _raised_at(err.__traceback__)
    context = f"task {desc!r}{_item_file(item)}" + (f", raised at {where}" if where else "")
    args = err.args
    if len(args) == 1 and isinstance(args[0], str) and str(err) == args[0]:
        err.args = (f"{args[0]} ({context})",)
        if str(err) == err.args[0]:
            return
        err.args = args
    elif not args and not str(err):
        err.args = (f"({context})",)
        return
    err.add_note(context)


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class _ExpectedFailures:
    """Runs a task; bad input and a full disk come back as a :class:`_Failed` value, so the
    worker logs no 'Compute Failed' traceback for what the user gets as one line anyway."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, item):
        from formats import FormatError
        from formats.output import is_disk_full

        try:
            return self.fn(item)
        except FormatError as err:
            return _Failed(err)
        except OSError as err:
            if is_disk_full(err):
                return _Failed(err)
            raise


class _Star:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, args):
        return self.fn(*args)


def local_runner(fn: Callable, items: Sequence, desc: str | None = None) -> list:
    """The in-process stand-in for :class:`TaskRunner` (tests, tiny inputs)."""
    return [fn(item) for item in items]
