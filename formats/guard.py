"""Guards around what a command writes: it never aliases an input, one run writes it, and
another tool's file is replaced only when asked.

* :func:`refuse_aliasing`: OUT may not be, contain or lie inside an input, whatever
  ``--overwrite`` says (replacing OUT would delete the input).
* :func:`check_output`: the whole rule for an output path, before any work starts
  (aliasing, file or folder, someone else's file without ``--overwrite``); the ``prep`` steps
  apply the same rule through :func:`guarded_output` and their manifests
  (``graphprep.pipeline.core.step.up_to_date``).
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
from typing import Callable, Iterable

from graphprep.formats.errors import FormatError
from graphprep.formats.output import restore_previous
from graphprep.formats.storage import is_url


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
        raise FormatError(f"{flag} {how} the input {given}: the input must stay as it is "
                          "(--overwrite does not change this); choose another path",
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
    """Refuse an OUT that :func:`check_output` refuses, then hold OUT's lock for the block
    (first undoing a replacement of OUT that a killed run left half done). Whether an existing
    OUT is the step's own is for its manifest to say (``graphprep.pipeline.core.step.up_to_date``)."""
    check_output(out, inputs, flag="OUT", folder=True, ours=lambda _: True,
                 what="this step's output", overwrite=False)
    if is_url(out):
        yield
        return
    with OutputLock(out):
        restore_previous(out)
        yield


def check_output(out: str, inputs: Iterable[str], *, flag: str, folder: bool,
                 ours: Callable[[str], bool], what: str, overwrite: bool) -> None:
    """The rule for every path a command writes (``prep report --out``, the trainer's
    ``--metrics-out`` and ``--checkpoint-dir``, ``trainer embed --out``), checked before any
    work starts. Holds nothing; reads at most ``ours``' few bytes.

    Raises :class:`FormatError` naming ``flag`` and ``out`` when ``out``:
    is, contains or lies inside one of ``inputs`` (symlinks resolved; ``--overwrite`` does not
    change this); is a file where a ``folder`` is written, or a folder where a file is; lies
    under a file; or exists, is not an empty folder, and ``ours(out)`` says it is not this
    command's own earlier output (``what`` names that output), unless ``overwrite``. The
    writer then builds the output beside ``out`` and swaps it in (``graphprep.formats.output``)."""
    refuse_aliasing(out, inputs, flag)
    if is_url(out):
        return
    if os.path.exists(out):
        if os.path.isdir(out) != folder:
            raise FormatError(f"{flag} is a {'file' if folder else 'folder'}; give the path "
                              f"of a {'folder' if folder else 'file'} to write", file=out)
        empty = folder and not os.listdir(out)
        if not (empty or overwrite or ours(out)):
            raise FormatError(f"{flag} exists and is not {what}; pass --overwrite to replace "
                              "it, or choose another path", file=out)
        return
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FormatError(f"{flag}: {parent} is a file, so nothing can be written under it",
                          file=out)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FormatError(f"{flag}: cannot write under {parent} (permission denied)", file=out)
