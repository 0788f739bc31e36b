"""Local launch: one process per rank on this machine, watched until all end; and the ranks'
side of it, watching their launcher.

Ranks get ``torchrun``'s environment variables (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) plus ``GRAPHPREP_LAUNCHER_PID`` and run
``python -m graphprep.trainer`` with the same arguments. The store's port is bound and listening before
any rank starts, and rank 0 inherits that socket (``GRAPHPREP_STORE_FD``): a port picked free
and closed again could be taken by another process before rank 0 binds it, and the other
ranks would then talk to whatever listens there.

* When a rank fails (non-zero exit or a signal) the others are ended at once and the launcher
  exits 1 naming it (2 when a rank exited 2: bad input, such as a model output of the
  wrong shape); a rank found stopped (SIGSTOP, state ``T``) is named as the one that
  stopped answering, since the rank that failed usually just timed out waiting for it. A
  rank writes why it failed, one line, to its error file (``GRAPHPREP_ERROR_FILE``); the
  launcher repeats that line last, so that the culprit it names ends the output.
* SIGTERM and SIGINT to the launcher are forwarded to every rank; ranks still alive after a
  grace period are killed; the launcher exits 128 + the signal number.
* A rank whose launcher dies (even by SIGKILL) exits within a second: the kernel sends it
  SIGTERM (``PR_SET_PDEATHSIG``) and a thread watches its parent process id.

No torch here: the launcher starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

log = logging.getLogger("graphprep.trainer")

GRACE_S = 5.0
LAUNCHER_ENV = "GRAPHPREP_LAUNCHER_PID"
STORE_FD_ENV = "GRAPHPREP_STORE_FD"     # rank 0's inherited, listening store socket
ERROR_FILE_ENV = "GRAPHPREP_ERROR_FILE"  # where a rank writes why it failed (one line)
PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it; another process may take it before
    it is bound again: for a job's own store use :func:`listening_socket`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening_socket(host: str, port: int = 0, backlog: int = 128) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: the OS picks) and listening; raises OSError."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(backlog)
    except OSError:
        listener.close()
        raise
    return listener


class _Forwarder:
    """Signal handlers that pass SIGTERM/SIGINT on to the ranks and remember the signal."""

    def __init__(self, procs: list[subprocess.Popen]):
        self.procs, self.received = procs, None
        self._previous = {}

    def __enter__(self) -> "_Forwarder":
        for signo in FORWARDED:
            self._previous[signo] = signal.signal(signo, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signo, handler in self._previous.items():
            signal.signal(signo, handler)

    def _handle(self, signo, frame) -> None:
        self.received = signo
        for p in self.procs:
            if p.returncode is None:  # no waitpid in a handler: the watch loop reaps
                try:
                    os.kill(p.pid, signo)
                except ProcessLookupError:
                    pass


def launched_at() -> float:
    """When the job was launched (``time.time()`` scale): our launcher's process start for its
    ranks, else (torchrun, a rank started by hand) this process's own start."""
    launcher = os.environ.get(LAUNCHER_ENV)
    try:
        return psutil.Process(int(launcher) if launcher else os.getpid()).create_time()
    except (psutil.Error, ValueError):
        return psutil.Process().create_time()


def launch_local(argv: list[str], world_size: int) -> int:
    """Run ``world_size`` ranks of ``python -m graphprep.trainer argv``; returns the job's exit code."""
    procs: list[subprocess.Popen] = []
    errors = tempfile.mkdtemp(prefix="graphprep-rank-errors-")
    try:
        code = _launch(argv, world_size, procs, errors)
        if code not in (0, 128 + signal.SIGTERM, 128 + signal.SIGINT):
            _repeat_cause(procs, errors)
        return code
    finally:
        shutil.rmtree(errors, ignore_errors=True)


def _launch(argv: list[str], world_size: int, procs: list[subprocess.Popen],
            errors: str) -> int:
    with _Forwarder(procs) as forwarder, \
            listening_socket("127.0.0.1", backlog=max(128, world_size)) as store:
        port, fd = store.getsockname()[1], store.fileno()
        for rank in range(world_size):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(world_size), **{LAUNCHER_ENV: str(os.getpid())},
                       **{ERROR_FILE_ENV: _error_file(errors, rank)})
            env.pop(STORE_FD_ENV, None)
            if rank == 0:
                env[STORE_FD_ENV] = str(fd)
            # RPC threads each get a glibc arena that keeps freed message buffers: with
            # learnable-embedding traffic a rank's RSS grew ~100 MB per epoch without this
            env.setdefault("MALLOC_ARENA_MAX", "2")
            procs.append(subprocess.Popen([sys.executable, "-m", "graphprep.trainer", *argv], env=env,
                                          pass_fds=(fd,) if rank == 0 else ()))
            if rank == 0:
                store.close()        # rank 0 holds it now; ranks connect once it serves
            if forwarder.received:
                break
        return _watch(procs, forwarder)


def _error_file(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.txt")


def _repeat_cause(procs: list[subprocess.Popen], folder: str) -> None:
    """Log, last, the line of the rank whose failure is the job's: the first rank that exited
    2 (bad input) and wrote one, else the first failed rank that wrote one."""
    failed = sorted((p.returncode != 2, rank) for rank, p in enumerate(procs)
                    if p.returncode not in (None, 0))
    for _, rank in failed:
        try:
            with open(_error_file(folder, rank)) as f:
                line = f.read().strip()
        except OSError:
            continue
        if line:
            log.error("%s", line.splitlines()[0])
            return


def _watch(procs: list[subprocess.Popen], forwarder: _Forwarder) -> int:
    while True:
        if forwarder.received:
            name = signal.Signals(forwarder.received).name
            log.error("received %s: passed on to every rank; those left after %g s are "
                      "killed", name, GRACE_S)
            _end(procs, terminate=False)
            return 128 + forwarder.received
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:  # all that failed since the last poll: a peer's death often fails others
            _blame(procs, failed)
            log.error("ending the other ranks")
            _end(procs)
            # 2: bad input, from whichever rank said so: the rank that found it may end a
            # moment after a peer that only saw it go
            return 2 if any(p.returncode == 2 for p in procs) else 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


def _blame(procs: list[subprocess.Popen], failed: list[tuple[int, int]]) -> None:
    """Log each failed rank, then any rank still alive but stopped: that one is the cause."""
    for rank, code in failed:
        why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        log.error("rank %d failed (%s)", rank, why)
    for rank, state in stopped_ranks(procs):
        log.error("rank %d stopped answering (process stopped, state %s): the failures above "
                  "are most likely ranks timing out waiting for it", rank, state)


def stopped_ranks(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """``(rank, state letter)`` of the live ranks the kernel reports stopped or traced."""
    letters = {psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t"}
    out = []
    for rank, p in enumerate(procs):
        if p.poll() is not None:
            continue
        try:
            status = psutil.Process(p.pid).status()
        except psutil.Error:
            continue
        if status in letters:
            out.append((rank, letters[status]))
    return out


def _end(procs: list[subprocess.Popen], terminate: bool = True) -> None:
    """SIGTERM every live rank (unless it was just sent a signal; SIGCONT too, so a stopped
    one acts on it), SIGKILL those left after the grace period."""
    for p in procs:
        if p.poll() is None:
            if terminate:
                p.terminate()
            p.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def watch_launcher(rank: int, poll_s: float = 0.5) -> None:
    """Make this rank exit when the process that launched it dies.

    Under our launcher (``GRAPHPREP_LAUNCHER_PID``): ``PR_SET_PDEATHSIG`` (SIGTERM when the
    launcher dies; it spawns ranks from its main thread, whose exit is what the kernel
    watches) plus a thread polling the parent pid every ``poll_s``. Under torchrun
    (``TORCHELASTIC_RUN_ID``) only the thread: the agent may spawn from a thread that ends
    before it does, which would kill the rank early. Otherwise nothing is watched.
    """
    ours = os.environ.get(LAUNCHER_ENV)
    if ours:
        parent = int(ours)
        _parent_death_signal(signal.SIGTERM)
    elif "TORCHELASTIC_RUN_ID" in os.environ:
        parent = os.getppid()
    else:
        return
    if os.getppid() != parent:  # died before the death signal was armed
        _orphaned(rank, parent)
    threading.Thread(target=_poll_parent, args=(rank, parent, poll_s), daemon=True,
                     name="launcher-watch").start()


def _poll_parent(rank: int, parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    _orphaned(rank, parent)


def _orphaned(rank: int, parent: int) -> None:
    log.error("rank %d: its launcher (pid %d) is gone; exiting", rank, parent)
    sys.stderr.flush()
    os._exit(128 + signal.SIGTERM)  # no cleanup: RPC shutdown would wait for gone peers


def _parent_death_signal(signo: int) -> None:
    """Ask the kernel to send ``signo`` when the parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signo), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the polling thread still covers it
