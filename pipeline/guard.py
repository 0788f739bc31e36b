"""Guards around a step's output folder: it never aliases an input, and one run writes it.

* :func:`refuse_aliasing`: OUT may not be, contain or lie inside an input, whatever
  ``--overwrite`` says (replacing OUT would delete the input).
* :class:`OutputLock`: an exclusive ``flock`` on ``.NAME.lock`` beside OUT, holding the
  holder's pid, host and command line. A second run fails at once naming the holder. The kernel
  drops the lock when its process dies, so a killed run never blocks the next one.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from contextlib import contextmanager
from typing import Iterable

from formats import FormatError
from formats.output import restore_previous
from formats.storage import is_url


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def refuse_aliasing(out: str, inputs: Iterable[str], flag: str = "OUT") -> None:
    """Raise :class:`FormatError` when local ``out`` is, contains or lies inside one of
    ``inputs`` (paths compared after resolving symlinks). URLs are not compared."""
    if is_url(out):
        return
    target = os.path.realpath(out)
    for given in inputs:
        if given is None or is_url(given):
            continue
        source = os.path.realpath(given)
        if target == source:
            how = "is"
        elif _inside(target, source):
            how = "lies inside"
        elif _inside(source, target):
            how = "contains"
        else:
            continue
        raise FormatError(f"{flag} {how} the input {given}: writing it would destroy the input "
                          "(--overwrite does not change this); choose another output folder",
                          file=out)


def lock_path(out: str) -> str:
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.lock")


class OutputLock:
    """``with OutputLock(out): ...`` holds the exclusive lock on ``out`` (see module doc)."""

    def __init__(self, out: str):
        self.out, self.path, self.fd = out, lock_path(out), None

    def __enter__(self) -> "OutputLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while self.fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 4096).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise FormatError(f"another run is writing this output ({holder}); wait for it "
                                  f"to end or stop it (lock: {self.path})", file=self.out) from None
            # The holder before us may have unlinked the file between our open and flock.
            if _same_file(fd, self.path):
                self.fd = fd
            else:
                os.close(fd)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"pid {os.getpid()} on {socket.gethostname()}: "
                          f"{' '.join(sys.argv)}".encode())
        return self

    def __exit__(self, *exc) -> None:
        try:
            os.unlink(self.path)
        finally:
            os.close(self.fd)
            self.fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


@contextmanager
def guarded_output(out: str, inputs: Iterable[str]):
    """Refuse an OUT aliasing ``inputs``, then hold OUT's lock for the block (first undoing a
    replacement of OUT that a killed run left half done)."""
    refuse_aliasing(out, inputs)
    if is_url(out):
        yield
        return
    with OutputLock(out):
        restore_previous(out)
        yield
