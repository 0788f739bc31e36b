"""Local launch: one process per rank on this machine, watched until all end.

Ranks get ``torchrun``'s environment variables (``MASTER_ADDR``, ``MASTER_PORT`` picked free
now, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) and run
``python -m trainer`` with the same arguments. When a rank fails (non-zero exit or a signal) the
others are ended at once and the launcher exits non-zero naming it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

from .rendezvous import free_port

log = logging.getLogger("trainer")

GRACE_S = 5.0


def launch_local(argv: list[str], world_size: int) -> int:
    """Run ``world_size`` ranks of ``python -m trainer argv``; returns the job's exit code."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world_size))
        procs.append(subprocess.Popen([sys.executable, "-m", "trainer", *argv], env=env))
    try:
        return _watch(procs)
    except KeyboardInterrupt:
        log.error("interrupted: ending all ranks")
        _end(procs)
        return 130


def _watch(procs: list[subprocess.Popen]) -> int:
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:  # all that failed since the last poll: a peer's death often fails others
            for rank, code in failed:
                why = f"killed by {signal.Signals(-code).name}" if code < 0 else \
                    f"exit code {code}"
                log.error("rank %d failed (%s)", rank, why)
            log.error("ending the other ranks")
            _end(procs)
            return 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
