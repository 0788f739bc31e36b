"""Dask for every step: an embedded local cluster or an existing one, and an ordered task runner
with a progress bar."""

from __future__ import annotations

import ctypes
import functools
import logging
import multiprocessing
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tqdm.auto import tqdm

from graphprep.pipeline.core.simd import worker_numpy_environ


log = logging.getLogger(__name__)

LOST_WORKER_TIMEOUT_KEY = "graphprep.lost-worker-timeout"   # dask.config key, seconds
LOST_WORKER_TIMEOUT_S = 120.0


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
    from graphprep.formats import FormatError

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
        check_scheduler_address(options.scheduler)
        connect_s = _connect_timeout()
        try:
            # Bounded here too: a server of another protocol that never speaks (a web
            # server) holds Dask's handshake past its own connect timeout.
            client = _within(lambda: Client(options.scheduler, security=options.security),
                             connect_s + ANSWER_S, "connect")
        except NoAnswer:
            raise ClusterUnreachable(f"no Dask scheduler answered within {connect_s:g} s "
                                     f"(Dask's distributed.comm.timeouts.connect): --scheduler "
                                     f"{options.scheduler}") from None
        except OSError as err:      # Dask's connect timeout: nothing answered
            raise ClusterUnreachable(f"no Dask scheduler answered ({err}): --scheduler "
                                     f"{options.scheduler}") from None
        except (MemoryError, ValueError, TypeError) as err:
            # Another protocol answered (a dashboard's HTTP port, a proxy): its bytes read
            # as a Dask frame length can ask for exabytes.
            raise ClusterUnreachable(
                f"what answers there is not a Dask scheduler ({type(err).__name__}: "
                f"{str(err)[:80]}); the scheduler's own port is 8786 unless set, the "
                f"dashboard's 8787: --scheduler {options.scheduler}") from None
        with client:
            _log_dashboard(client)
            _require_workers(client, worker_names)
            yield client
        return
    check_embedded(options, len(worker_names) or options.workers)
    import dask

    # for the cluster's life: a worker restarted between passes is forked too
    if worker_names:
        with dask.config.set(FORKED_WORKERS), _named_cluster(
                worker_names, options.memory_limit, worker_logs) as cluster, \
                Client(cluster) as client:
            _log_dashboard(client)
            yield client
        return
    with dask.config.set(FORKED_WORKERS), local_cluster(
            options.workers, options.memory_limit, worker_logs) as cluster, \
            Client(cluster) as client:
        log.info("embedded Dask cluster: %d workers", options.workers)
        _log_dashboard(client)
        yield client


MIN_WORKER_BYTES = 256 << 20   # an idle worker holds ~170 MB once a step's modules are in


def memory_limit_bytes(memory_limit: str | int | float) -> int | None:
    """One embedded worker's memory limit in bytes, as Dask's nanny sets it from
    ``--memory-limit`` ("auto": the machine's memory over its cores; None: no limit). Raises
    ``FormatError`` naming the option for a value that is not a size."""
    from distributed.worker_memory import parse_memory_limit

    from graphprep.formats import FormatError
    try:
        return parse_memory_limit(memory_limit, 1, logger=log)
    except (ValueError, TypeError, AssertionError):
        raise FormatError(f"not a memory size (e.g. 4GiB, 0.5 for half the machine, 0 for no "
                          f"limit, auto): --memory-limit {memory_limit}") from None


def check_embedded(options: ClusterOptions, workers: int) -> None:
    """Refuse, naming the option (``FormatError``), an embedded cluster that cannot start:
    a ``--memory-limit`` that is not a size or below what an idle worker holds, or more
    ``--workers`` than the machine's available memory holds idle workers. A cluster given by
    address or by the caller is not checked (its workers are not ours)."""
    import psutil

    from graphprep.formats import FormatError
    if options.scheduler or options.client is not None:
        return
    limit = memory_limit_bytes(options.memory_limit)
    # "auto" is Dask's own share per core, not the user's choice: not refused here.
    if options.memory_limit != "auto" and limit is not None and limit < MIN_WORKER_BYTES:
        raise FormatError(f"a worker holds ~170 MB before its first task; give it at least "
                          f"{MIN_WORKER_BYTES >> 20} MiB: --memory-limit {options.memory_limit}")
    available = psutil.virtual_memory().available
    if workers * MIN_WORKER_BYTES > available:
        raise FormatError(f"{workers} workers need ~{workers * MIN_WORKER_BYTES / 1e9:.1f} GB "
                          f"to start, {available / 1e9:.1f} GB available: --workers {workers}")


# Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536 so that freed memory goes back
# to the OS at once. Setting it also turns off glibc's adaptive mmap threshold: every array over
# 128 KiB becomes a fresh mmap whose pages the kernel zeroes on first touch. Our tasks allocate
# and free arrays of a chunk's size over and over, so with it the multilevel partitioner spent
# much of its CPU in the kernel (examples/benchmarks/RESULTS.md, "bench_partition.py
# `--methods metis,multilevel,forced`"). Workers of an embedded cluster run without it; see
# docs/clusters.md for workers you start yourself.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}

# An idle embedded cluster of 2 workers used 8.3 s of CPU a minute (14% of a core) with
# Dask's defaults: the statistical profiler samples each worker's threads every 10 ms, and
# every process checks its event loop every 20 ms. Without the profiler and with a 1 s check,
# 2.7 s. Both only feed the dashboard (its profile page stays empty; a blocked event loop is
# still reported, to the second); a step spends this while it waits on its slowest task and
# on every cluster start and close (examples/benchmarks/RESULTS.md, "An idle cluster's CPU").
IDLE_QUIET = {"distributed.worker.profile.enabled": False,
              "distributed.admin.tick.interval": "1s"}

# Dask's nannies spawn each worker as a fresh interpreter that imports Dask, numpy and pyarrow
# again. A forkserver imports them once per process and forks each worker from that state
# (Dask's own test suite starts its workers so): a third less CPU per cluster start, a fifth
# less per small prep command, and less memory on the machine; each worker's RssAnon counts the
# pages it shares with the forkserver, so it reads higher (examples/benchmarks/RESULTS.md,
# "Workers forked, not spawned").
# The forkserver is a fresh single-threaded process, so forking it is safe; what it imports is
# WORKER_PRELOAD only (Dask's own list adds pandas, which no step uses, and imports it in this
# process too), and never torch (tests/cli/test_no_torch.py).
FORKED_WORKERS = ({"distributed.worker.multiprocessing-method": "forkserver"}
                  if "forkserver" in multiprocessing.get_all_start_methods() else {})  # not Windows
WORKER_PRELOAD = ("distributed", "numpy", "pyarrow", "pyarrow.parquet")
CLUSTER_CONFIG = {**WORKER_ENVIRON, **IDLE_QUIET, **FORKED_WORKERS}


def embedded_workers(root: int | None = None) -> list:
    """The Dask worker processes that the embedded clusters of process ``root`` (default: this
    process) run now, as ``psutil.Process`` objects: those forked from its forkserver, and any
    spawned (a worker that a nanny restarted outside ``FORKED_WORKERS``' config). For
    benchmarks and tests that sample or kill workers from outside; holds nothing."""
    import psutil

    def command(p) -> str:
        return " ".join(p.cmdline())

    found = []
    for child in psutil.Process(root).children(recursive=True):
        try:
            if "spawn_main" in command(child) or (
                    "multiprocessing.forkserver" in command(child.parent())):
                found.append(child)
        except (psutil.Error, AttributeError):     # gone, or its parent gone (None)
            pass
    return found


def _preload_worker_modules() -> None:
    """Name the modules the forkserver imports before it forks workers, once per process and
    before Dask names its own (``distributed.utils.get_mp_context`` sets them only while its
    flag is down); then start it, in the environment its numpy needs (``simd.py``)."""
    from distributed import utils
    if FORKED_WORKERS and not getattr(utils, "_forkserver_preload_set", True):
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
        utils._forkserver_preload_set = True
        _start_forkserver(worker_numpy_environ())


def _start_forkserver(environ: dict[str, str]) -> None:
    """Start this process's forkserver (if it is not running) with ``environ`` added to its
    environment, which every worker forked from it inherits; this process's own environment
    is restored at once."""
    from multiprocessing import forkserver
    saved = {k: os.environ.get(k) for k in environ}
    os.environ.update(environ)
    try:
        forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

# The adaptive threshold has its own cost: once a 32 MB array is freed, every array up to 32 MB
# goes on the heap, whose freed holes stay resident. A fixed 8 MB threshold keeps chunk-sized
# temporaries on the heap and returns larger ones to the OS at free. Only the multilevel
# partitioner asks for it (fix_mmap_threshold): it lowered the planted 10^9 graph's partition
# peak in no more time, while synth and verify, which fill chunk-sized arrays over and over,
# slowed down under it (examples/benchmarks/RESULTS.md, "A fixed 8 MB mmap threshold").
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
                  worker_logs: int = QUIET_WORKER_LOGS, config: dict = CLUSTER_CONFIG,
                  **kwargs):
    """A ``LocalCluster`` of ``workers`` single-threaded processes on this host (a context
    manager), its processes started under the Dask ``config`` (default: the worker environment
    and the idle settings above); Dask logs below ``worker_logs`` are dropped."""
    import dask
    from distributed import LocalCluster

    _preload_worker_modules()
    with dask.config.set(config):
        return _keeping_nannies(LocalCluster)(
            n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
            dashboard_address="127.0.0.1:0", silence_logs=worker_logs, **kwargs)


@functools.cache
def _keeping_nannies(base: type) -> type:
    """``base`` (a ``SpecCluster``) without its close of a lost worker's nanny.

    A ``SpecCluster`` closes the nanny of a worker that is away exactly
    ``distributed.deploy.lost-worker-timeout`` (15 s) after it left, a check meant for job
    queues whose jobs died. On this host a nanny brings its worker back itself; but a worker
    restarted between passes (``recycle.py``) again at that moment is away then, loses its
    nanny and never comes back. On a cluster that serves several steps (benchmarks, the
    Python API) one step's restart lands on the check of another's: both workers of
    ``bench_sampling.py`` went so, and its next step waited with no worker left."""
    from distributed.deploy.cluster import Cluster

    def _update_worker_status(self, op, msg):
        Cluster._update_worker_status(self, op, msg)    # the bookkeeping, not the close

    return type(f"{base.__name__}KeepingNannies", (base,),
                {"_update_worker_status": _update_worker_status,
                 "__module__": __name__, "__doc__": base.__doc__})


def _log_dashboard(client) -> None:
    services = client.scheduler_info(n_workers=0).get("services", {})
    link = client.dashboard_link if "dashboard" in services else None
    log.info("Dask dashboard: %s", link or "none (the scheduler serves no dashboard)")


def _require_workers(client, names) -> None:
    have = {w.get("name") for w in workers_info(client).values()}
    missing = [n for n in names if n not in have]
    if missing:
        from graphprep.formats import FormatError
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

    _preload_worker_modules()
    with dask.config.set(CLUSTER_CONFIG):
        scheduler = {"cls": Scheduler, "options": {"dashboard_address": "127.0.0.1:0",
                                                   "host": "127.0.0.1"}}
        return _keeping_nannies(SpecCluster)(workers=workers, silence_logs=worker_logs,
                                             scheduler=scheduler)


class ClusterFault(RuntimeError):
    """The cluster failed the step (not the input): its message is one line, culprit last,
    which the CLI prints as it is (exit 1)."""


class LostWorkerError(ClusterFault):
    """A worker that tasks need left the cluster and did not come back in time."""


def _connect_timeout() -> float:
    import dask
    from dask.utils import parse_timedelta
    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s"))


class ClusterUnreachable(ClusterFault):
    """The ``--scheduler`` address answers nothing (the message names it last)."""


SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")   # distributed's comm backends


def check_scheduler_address(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``--scheduler`` address that cannot name a scheduler (``FormatError``: no
    port, an unknown scheme or host) or that refuses connections (``ClusterUnreachable``, at
    once rather than after Dask's 30 s of retries). A host that does not answer within
    ``timeout`` is left to Dask's own connect timeout."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    from graphprep.formats import FormatError
    try:
        scheme, location = parse_address(address)
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; expected tcp:// or tls://")
        if scheme not in ("tcp", "tls"):
            return
        host, port = parse_host_port(location)
    except ValueError as err:
        raise FormatError(f"not a Dask scheduler address like tcp://HOST:8786 ({err}): "
                          f"--scheduler {address}") from None
    try:
        socket.create_connection((host or "127.0.0.1", port), timeout=timeout).close()
    except socket.gaierror:
        raise FormatError(f"unknown host {host!r}: --scheduler {address}") from None
    except ConnectionRefusedError:
        raise ClusterUnreachable(f"nothing listens there (connection refused; is the "
                                 f"scheduler running?): --scheduler {address}") from None
    except OSError:
        pass            # slow or filtered: Dask's connect timeout decides


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

        # Function-local: recycle.py subclasses distributed's WorkerPlugin, and importing
        # distributed is left to the steps that start a cluster (recycle.py does not import
        # this module: no cycle).
        from graphprep.pipeline.core.recycle import Recycler, recycle_limit_bytes

        self.client, self.progress = client, progress
        limit = recycle_limit_bytes(client)
        self.lost_worker_timeout = lost_worker_timeout if lost_worker_timeout is not None else \
            float(dask.config.get(LOST_WORKER_TIMEOUT_KEY, LOST_WORKER_TIMEOUT_S))
        self.recycler = Recycler(client, limit, self.lost_worker_timeout) \
            if limit is not None else None
        self.known_workers: dict[str, str] = {}    # name -> address: every worker seen

    def __call__(self, fn: Callable, items: Sequence, desc: str | None = None,
                 workers: Sequence[str] | None = None) -> list:
        """``workers``: per item, the name of the worker that must run it (or None)."""
        items = list(items)
        if not items:
            return []
        desc = desc or getattr(fn, "__name__", "tasks")
        if self.recycler is not None and self.recycler.active:
            self._recycle(desc)     # between passes: no task of this runner is running
        pins = list(workers) if workers is not None else [None] * len(items)
        changed = threading.Event()     # set as any of the futures ends
        futures = [self._submit(fn, item, pin, changed) for item, pin in zip(items, pins)]
        watch = _WorkerWatch(self.client, desc, self.lost_worker_timeout, self.known_workers)
        results = [None] * len(items)
        with tqdm(total=len(items), desc=desc, disable=not self.progress, unit="task",
                  leave=False) as bar:
            pending = set(range(len(items)))
            next_check = time.monotonic() + self.POLL_S
            while pending:
                # The futures' states, read here without a call into Dask: a Dask call (even
                # distributed.wait with a timeout) blocks for good when the client's event
                # loop or the scheduler's comm does; every call below is bounded instead.
                done = _first_done(futures, pending, self.POLL_S, changed)
                failed = [i for i in done if futures[i].status == "error"] or \
                    [i for i in done if futures[i].status == "cancelled"]
                if failed:
                    k = failed[0]
                    self._cancel_and_settle([futures[j] for j in pending if j != k],
                                            f"task {k} of {desc!r} failed")
                    self._raise_failure(futures[k], items[k], desc, self.lost_worker_timeout)
                # Fetched at once: a result left on a worker that dies is lost with it.
                fetched = self._results([futures[i] for i in done], desc, watch, pending) \
                    if done else []
                for i, value in zip(done, fetched):
                    results[i] = value
                    futures[i].release()
                    if isinstance(value, _Failed):
                        self._cancel_and_settle([futures[j] for j in pending if j != i],
                                                f"task {i} of {desc!r} failed")
                        raise value.error
                    pending.discard(i)
                    bar.update()
                if pending and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.POLL_S
                    unfinished = f"{len(pending)} of {len(items)} tasks unfinished"
                    for i in watch.check({i: pins[i] for i in pending if pins[i] is not None},
                                         unfinished):
                        _within(futures[i].cancel, ANSWER_S, "cancel")
                        futures[i] = self._submit(fn, items[i], pins[i], changed)
        return results

    def _recycle(self, desc: str) -> None:
        """The recycler's restarts, bounded: a restart that has not ended within its timeout
        (the lost-worker timeout, at least ``Recycler.MIN_RESTART_S``) fails the step naming
        the workers it restarted, whatever the Dask calls in it do."""
        try:
            _within(self.recycler, self.recycler.timeout + ANSWER_S, "restart")
        except NoAnswer:
            raise LostWorkerError(
                f"Dask workers restarted to free their memory before {desc!r} did not come "
                f"back within {self.recycler.timeout:g} s: "
                f"{self.recycler.describe_restarting() or 'none answered'}") from None

    def _results(self, done: list, desc: str, watch: "_WorkerWatch", pending) -> list:
        """The results of finished tasks, fetched in one call. The fetch is waited for while
        the cluster lives (a worker lost meanwhile: Dask computes its results again), and
        fails the step when the watch finds the cluster lost."""
        call = _Call(lambda: self.client.gather(done), "gather")
        while not call.wait(ANSWER_S):
            watch.check({}, f"fetching the results of {len(done)} finished tasks of "
                            f"{desc!r}; {len(pending) - len(done)} more unfinished")
        return call.get()

    @staticmethod
    def _raise_failure(future, item, desc: str, timeout: float = LOST_WORKER_TIMEOUT_S):
        """Raise the exception of a failed task, with the task, its file and the line that
        raised it added to the message (the user sees one line). A task cancelled by someone
        else (the scheduler, another client) raises :class:`TaskCancelled` saying so."""
        from graphprep.formats import FormatError

        if future.status == "cancelled":
            raise TaskCancelled(f"a task of {desc!r}{_item_file(item)} was cancelled by the "
                                f"Dask cluster, not by this step ({future.key})")
        try:
            _within(future.result, timeout, "result")
        except NoAnswer:
            raise LostWorkerError(f"a task of {desc!r}{_item_file(item)} failed and the Dask "
                                  f"cluster did not tell why within {timeout:g} s") from None
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

        def cancel():
            try:
                self.client.cancel(futures, reason=why or None)
            except TypeError:   # distributed before 2024.2 takes no reason
                self.client.cancel(futures)
        deadline = time.monotonic() + timeout
        try:
            _within(cancel, ANSWER_S, "cancel")
        except NoAnswer:
            log.warning("the Dask scheduler did not confirm the cancel of %d tasks", len(keys))
            return
        quiet_since = None
        while time.monotonic() < deadline:
            # Asked of the workers: the scheduler forgets a cancelled key at once, while the
            # worker's thread runs it to its end (state 'cancelled', still executing). Quiet
            # for SETTLE_S, not once: a task the scheduler sent before the cancel may reach
            # its worker, and start, after a poll found nothing running.
            try:
                per_worker = _within(lambda: self.client.run(_running_keys, on_error="ignore"),
                                     ANSWER_S, "run")
            except NoAnswer:
                log.warning("the Dask workers did not say whether cancelled tasks still run")
                return
            now = time.monotonic()
            if keys & {k for ks in per_worker.values() for k in ks}:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= self.SETTLE_S:
                return
            time.sleep(0.05)
        log.warning("cancelled tasks still running after %g s", timeout)

    def _submit(self, fn, item, pin: str | None, changed: threading.Event):
        """``fn(item)`` submitted (on worker ``pin`` alone, if given); ``changed`` is set when
        it ends. Registering the callback only schedules it on the client's event loop: it
        cannot block."""
        task = _ExpectedFailures(fn)
        pinned = {} if pin is None else {"workers": [pin], "allow_other_workers": False}
        future = self.client.submit(task, item, pure=False, **pinned)
        future.add_done_callback(lambda _: changed.set())
        return future

    def star(self, fn: Callable, arg_tuples: Iterable[tuple], desc: str | None = None) -> list:
        """Like ``__call__`` for functions of several arguments."""
        return self(_Star(fn), list(arg_tuples), desc or getattr(fn, "__name__", "tasks"))


def _running_keys(dask_worker) -> list:
    """On a worker: the keys of the tasks occupying one of its threads, cancelled ones
    included (they run to their end)."""
    return [ts.key for ts in dask_worker.state.all_running_tasks]


ANSWER_S = 5.0     # how long one Dask call is waited for before the watch is asked again


class NoAnswer(TimeoutError):
    """A Dask call did not return in time (it may still be running in its thread)."""


class _Call:
    """A blocking call run in a daemon thread, so that its caller can stop waiting for it: a
    Dask call on a client whose event loop or comm is stuck never returns, whatever timeout
    it was given, and a daemon thread does not hold the process at its exit."""

    def __init__(self, fn: Callable[[], object], what: str = "a Dask call"):
        self.what, self._done, self._box = what, threading.Event(), {}
        threading.Thread(target=self._run, args=(fn,), daemon=True,
                         name=f"graphprep-{what}").start()

    def _run(self, fn) -> None:
        try:
            self._box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller in get()
            self._box["error"] = err
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """Whether the call ended within ``timeout`` seconds."""
        return self._done.wait(timeout)

    def get(self):
        """The call's value, or its exception raised here (the call must have ended)."""
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def _within(fn: Callable[[], object], timeout: float, what: str = "a Dask call"):
    """``fn()`` if it returns within ``timeout`` seconds, else :class:`NoAnswer`."""
    call = _Call(fn, what)
    if not call.wait(timeout):
        raise NoAnswer(f"{what}: no answer within {timeout:g} s")
    return call.get()


_DONE = ("finished", "error", "cancelled")


def _first_done(futures: list, pending: set[int], timeout: float,
                changed: threading.Event) -> list[int]:
    """The pending futures done within ``timeout`` seconds, in order; read from their local
    states (no call into Dask, so nothing here can block). Their status, not ``done()``: that
    reads an event only a waiter creates. "lost" (its worker died with the result) is not
    done: the scheduler computes it again. Woken by ``changed`` (set as a future ends), and
    at the latest every 0.1 s whatever the callbacks do. Sleeping between polls instead
    noticed ends late: a set of two 150 ms tasks cost 96 ms more than its tasks, now 21
    (``bench_chunk.py``'s ``task_set_overhead_ms``)."""
    deadline = time.monotonic() + timeout
    while True:
        changed.clear()
        done = sorted(i for i in pending if futures[i].status in _DONE)
        now = time.monotonic()
        if done or now >= deadline:
            return done
        changed.wait(min(0.1, deadline - now))


class _WorkerWatch:
    """Notices workers leaving and coming back while a set of tasks runs (polled, each ask of
    the scheduler bounded). Fails the step with :class:`LostWorkerError` when, for longer than
    ``timeout`` seconds, a worker that pinned tasks need is away, no worker is left (also when
    none was there from the start), or the scheduler does not answer at all."""

    STABLE = 2    # a worker is back once present in this many answers in a row (not flapping)

    def __init__(self, client, desc: str, timeout: float, known: dict | None = None):
        self.client, self.desc, self.timeout = client, desc, timeout
        self.known = known if known is not None else {}     # name -> address, ever seen
        self.gone_since: dict[str, float] = {}
        self.back: dict[str, int] = {}
        now = time.monotonic()
        self.answered_at, self.empty_since = now, None
        self._asking: _Call | None = None
        self.start = self._ask(ANSWER_S)
        if self.start is None:
            self.start = {}
        self.seen = dict(self.start)
        for name in set(self.known) - set(self.start):    # lost before this set of tasks
            self.gone_since.setdefault(name, now)
        self.known.update(self.start)
        if not self.start:
            self.empty_since = now

    def _ask(self, wait: float) -> dict[str, str] | None:
        """The current workers (name -> address), or None when the scheduler has not answered
        within ``wait`` seconds (the question stays open: one at a time)."""
        if self._asking is None:
            self._asking = _Call(lambda: _workers_by_name(self.client), "identity")
        if not self._asking.wait(wait):
            return None
        call, self._asking = self._asking, None
        try:
            now = call.get()
        except Exception as err:  # noqa: BLE001 - a refused or broken comm: no answer
            log.debug("the Dask scheduler did not answer: %s", err)
            return None
        self.answered_at = time.monotonic()
        return now

    def check(self, pinned: dict[int, str], unfinished: str = "") -> list[int]:
        """Pending tasks (index -> worker name) whose worker came back at a new address.
        ``unfinished`` says what is left (for the message of a failure)."""
        now = self._ask(min(ANSWER_S, self.timeout))
        t = time.monotonic()
        if now is None:
            if t - self.answered_at > self.timeout:
                raise LostWorkerError(
                    f"no answer for {t - self.answered_at:.0f} s during {self.desc!r}"
                    f"{self._unfinished(unfinished)} from the Dask scheduler "
                    f"{_address(self.client)}")
            return []
        for name, addr in self.seen.items():
            if name not in now and name not in self.gone_since:
                log.warning("Dask worker %s (%s) left the cluster during %r", name, addr,
                            self.desc)
                self.gone_since[name] = t
        moved = {n for n, a in now.items() if n in self.seen and self.seen[n] != a}
        for name in sorted(moved - set(self.gone_since)):   # left and came back between asks
            log.warning("Dask worker %s is back at %s", name, now[name])
        for name in list(self.gone_since):
            self.back[name] = self.back.get(name, 0) + 1 if name in now else 0
            if self.back[name] >= self.STABLE or name in moved:
                log.warning("Dask worker %s is back at %s", name, now[name])
                del self.gone_since[name], self.back[name]
        self.seen.update(now)
        self.known.update(now)
        if not now or self.back.keys() >= set(now):     # none, or none back for good yet
            self.empty_since = self.empty_since or t
        else:
            self.empty_since = None
        self._fail_if_lost(now, set(pinned.values()), unfinished)
        return [i for i, name in pinned.items() if name in moved]

    def _fail_if_lost(self, now: dict[str, str], needed: set[str], unfinished: str) -> None:
        t = time.monotonic()
        for name, since in self.gone_since.items():
            if name in needed and t - since > self.timeout:
                raise LostWorkerError(
                    f"Dask worker {name} ({self.known.get(name, '?')}) left the cluster during "
                    f"{self.desc!r} and did not come back within {self.timeout:g} s; its "
                    f"tasks cannot run elsewhere: restart it, then rerun the command to resume"
                    + (f" ({unfinished})" if unfinished else ""))
        if self.empty_since is not None and t - self.empty_since > self.timeout:
            head = (f"no Dask worker came back within {self.timeout:g} s to run {self.desc!r}"
                    f"{self._unfinished(unfinished)}")
            if not self.known:
                raise LostWorkerError(f"no Dask worker joined within {self.timeout:g} s to run "
                                      f"{self.desc!r}{self._unfinished(unfinished)}; the "
                                      f"scheduler has none: {_address(self.client)}")
            raise LostWorkerError(f"{head}; every worker left the cluster: " + ", ".join(
                f"worker {n} ({a})" for n, a in sorted(self.known.items())))

    @staticmethod
    def _unfinished(unfinished: str) -> str:
        return f" ({unfinished})" if unfinished else ""


def _address(client) -> str:
    try:
        return str(client.scheduler.address)
    except AttributeError:
        return "?"


class TaskCancelled(RuntimeError):
    """A task of a step was cancelled by the cluster (not by the step), so it has no result."""


# the repository: this file is pipeline/core/cluster.py
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
        from graphprep.formats import FormatError
        from graphprep.formats.output import is_disk_full

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
